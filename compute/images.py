"""A saved image's status: one function moves it (IMAGE_TRANSITIONS), under the image's lock."""

import logging

from django.db import transaction

from compute.choices import IMAGE_TRANSITIONS
from compute.selectors import image_locked

logger = logging.getLogger(__name__)


def image_transition(image_id: str, to: str, *, size_bytes: int = 0, error: str = "") -> bool:
    """Move a saved image on (IMAGE_TRANSITIONS): ready with its size, or failed with why.
    False, and nothing changed, when it is already past saving (a task run twice)."""
    with transaction.atomic():
        image = image_locked(image_id)
        if to not in IMAGE_TRANSITIONS[image.status]:
            return False
        image.status, image.size_bytes, image.error_message = to, size_bytes, error
        image.save(update_fields=["status", "size_bytes", "error_message"])
    logger.info("image.%s image=%s size_bytes=%d", to, image_id, size_bytes)
    return True
