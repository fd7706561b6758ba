"""Events: what happened to a tenant's resources, reported once by the app that changed them
(`events.emit`), and fanned out by workers to the tenant's webhooks and notification channels
(e-mail, WeCom, DingTalk and Feishu group bots)."""
