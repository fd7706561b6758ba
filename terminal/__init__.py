"""The web terminal service (docs/user-guide.md "Terminal"): an ASGI app, served by uvicorn beside
the console's gunicorn, that bridges the browser's WebSocket at /terminal/<instance>/ws to a shell
in the instance's container through the Kubernetes exec API. It runs with KUBE_ACCESS=exec and its
own service account, so the console's web tier still holds no cluster credential."""
