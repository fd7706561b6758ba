import os

from django.core.wsgi import get_wsgi_application

from starverse.core.wsgi import drain_unread_body
from starverse.heap import freeze_startup_heap

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "starverse.settings.dev")
# a body answered unread is read first, so that its keep-alive connection serves the next request
application = drain_unread_body(get_wsgi_application())
freeze_startup_heap()  # after start-up: the collector skips what lives for good
