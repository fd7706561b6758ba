"""POST /webhooks/stripe: verify the signature on the raw body, store the event once, answer
200 at once; the work happens after commit in billing.tasks.process_stripe_event."""

import logging

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from billing import stripe_gateway
from billing.payments import stripe_event_receive
from starverse.core.errors import InvalidInput

logger = logging.getLogger(__name__)
MAX_BODY_BYTES = 512 * 1024


@csrf_exempt
@require_POST
def stripe_webhook(request: HttpRequest) -> JsonResponse:
    if len(request.body) > MAX_BODY_BYTES:
        return JsonResponse({"detail": "body too large", "code": "too_large"}, status=400)
    try:
        event, created = stripe_event_receive(
            payload=request.body, signature=request.headers.get("Stripe-Signature", "")
        )
    except stripe_gateway.InvalidSignature as error:
        logger.warning("stripe.webhook_refused reason=%s", error)
        return JsonResponse({"detail": str(error), "code": "invalid_signature"}, status=400)
    except InvalidInput as error:
        logger.warning("stripe.webhook_refused reason=%s", error.message)
        return JsonResponse({"detail": error.message, "code": error.code}, status=400)
    return JsonResponse(
        {"received": True, "duplicate": not created, "id": event.id if event else None}
    )
