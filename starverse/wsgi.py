import os

from django.core.wsgi import get_wsgi_application

from starverse.heap import freeze_startup_heap

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "starverse.settings.dev")
application = get_wsgi_application()
freeze_startup_heap()  # after start-up: the collector skips what lives for good
