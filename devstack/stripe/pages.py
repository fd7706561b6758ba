"""HTML for the hosted checkout page and the index: plain, inline-styled, clearly a demo."""

from html import escape
from typing import Any

BANNER = (
    "DEMO — local Stripe stand-in, no real money moves / "
    "演示环境——本地 Stripe 模拟，不会产生真实扣款"
)
_SYMBOLS = {"cny": "¥", "usd": "$", "eur": "€", "gbp": "£", "hkd": "HK$", "jpy": "¥"}
_ZERO_DECIMAL = {"jpy", "krw", "vnd", "clp", "isk", "ugx", "xaf", "xof"}
_METHOD_LABELS = {
    "card": "Card / 银行卡",
    "alipay": "Alipay / 支付宝",
    "wechat_pay": "WeChat Pay / 微信支付",
    "async": "Delayed payment (async demo) / 延迟到账（演示）",
}

_CSS = """
*{box-sizing:border-box}
body{margin:0;font-family:-apple-system,"Segoe UI","PingFang SC","Microsoft YaHei",sans-serif;
background:#f3f4f8;color:#1f2333}
.banner{background:#b45309;color:#fff;font-weight:700;text-align:center;padding:14px 16px;
font-size:17px;letter-spacing:.02em}
main{max-width:460px;margin:40px auto;background:#fff;border-radius:14px;padding:32px;
box-shadow:0 8px 30px rgba(20,24,60,.08)}
h1{font-size:15px;font-weight:600;color:#5b6078;margin:0 0 6px}
.amount{font-size:40px;font-weight:700;margin:0 0 24px}
fieldset{border:1px solid #e3e5ee;border-radius:10px;padding:8px 14px;margin:0 0 22px}
legend{font-size:13px;color:#5b6078;padding:0 6px}
label{display:block;padding:9px 0;font-size:15px;cursor:pointer}
input[type=radio]{margin-right:10px}
button{width:100%;background:#4f46e5;color:#fff;border:0;border-radius:10px;padding:14px;
font-size:16px;font-weight:600;cursor:pointer}
button:hover{background:#4338ca}
.cancel{display:block;text-align:center;margin-top:16px;color:#5b6078}
.note{font-size:12px;color:#8a8fa5;margin-top:22px;text-align:center}
.message{font-size:17px;line-height:1.6}
.error{background:#fef2f2;color:#991b1b;border-radius:8px;padding:10px 12px;margin:0 0 16px}
table{width:100%;border-collapse:collapse;font-size:13px}
td,th{text-align:left;padding:6px 4px;border-bottom:1px solid #eceef4}
.wide{max-width:980px}
"""


def format_amount(amount: int, currency: str) -> str:
    """``123456, "cny"`` → ``¥1,234.56``."""
    code = currency.lower()
    symbol = _SYMBOLS.get(code, code.upper() + " ")
    if code in _ZERO_DECIMAL:
        return f"{symbol}{amount:,}"
    sign = "-" if amount < 0 else ""
    major, minor = divmod(abs(amount), 100)
    return f"{sign}{symbol}{major:,}.{minor:02d}"


def _document(title: str, body: str, wide: bool = False) -> str:
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        # no icon to fetch: a browser would otherwise ask for /favicon.ico and log its 404
        '<link rel="icon" href="data:,">'
        f"<title>{escape(title)} · DEMO</title><style>{_CSS}</style></head><body>"
        f'<div class="banner">{escape(BANNER)}</div>'
        f'<main class="{"wide" if wide else ""}">{body}</main></body></html>'
    )


def checkout_page(session: dict[str, Any], product_name: str, error: str | None = None) -> str:
    amount = format_amount(session["amount_total"], session["currency"])
    head = f'<h1>{escape(product_name)}</h1><p class="amount">{escape(amount)}</p>'
    if session["status"] == "expired":
        message = (
            "This checkout session has expired; nothing was charged. / 该支付会话已过期，未扣款。"
        )
        return _document("Expired", head + f'<p class="message">{escape(message)}</p>')
    if session["status"] == "complete":
        message = "This checkout session is already complete. / 该支付会话已完成。"
        link = escape(session["success_url"].replace("{CHECKOUT_SESSION_ID}", session["id"]))
        body = head + f'<p class="message">{escape(message)}</p>'
        body += f'<a class="cancel" href="{link}">Back to the site / 返回</a>'
        return _document("Complete", body)
    methods = [*session["payment_method_types"], "async"]
    radios = "".join(
        f'<label><input type="radio" name="method" value="{escape(m)}"'
        f"{' checked' if i == 0 else ''}>{escape(_METHOD_LABELS.get(m, m))}</label>"
        for i, m in enumerate(methods)
    )
    sid = escape(session["id"])
    problem = f'<p class="error">{escape(error)}</p>' if error else ""
    body = (
        f'{head}{problem}<form method="post" action="/pay/{sid}">'
        f"<fieldset><legend>Payment method / 支付方式</legend>{radios}</fieldset>"
        f'<button type="submit">Pay {escape(amount)} (demo) / 支付（演示）</button></form>'
        f'<a class="cancel" href="{escape(session["cancel_url"])}">Cancel / 取消</a>'
        f'<p class="note">Session {sid}</p>'
    )
    return _document("Checkout", body)


def message_page(title: str, message: str) -> str:
    return _document(title, f'<p class="message">{escape(message)}</p>')


def index_page(sessions: list[dict[str, Any]], events: list[dict[str, Any]]) -> str:
    rows = "".join(
        "<tr>"
        f'<td><a href="/pay/{escape(s["id"])}">{escape(s["id"][:24])}…</a></td>'
        f"<td>{escape(format_amount(s['amount_total'], s['currency']))}</td>"
        f"<td>{escape(s['status'])}</td><td>{escape(s['payment_status'])}</td></tr>"
        for s in sessions[:50]
    )
    event_rows = "".join(
        f"<tr><td>{escape(e['id'][:24])}…</td><td>{escape(e['type'])}</td>"
        f"<td>{escape(e['status'])}</td><td>{len(e['attempts'])}</td></tr>"
        for e in events[:100]
    )
    body = (
        "<h1>Local Stripe stand-in</h1>"
        "<p>Checkout sessions / 支付会话</p><table><tr><th>Session</th><th>Amount</th>"
        f"<th>Status</th><th>Payment</th></tr>{rows}</table>"
        '<p>Events / 事件 (JSON: <a href="/_fake/events">/_fake/events</a>)</p>'
        "<table><tr><th>Event</th><th>Type</th><th>Delivery</th><th>Attempts</th></tr>"
        f"{event_rows}</table>"
    )
    return _document("Local Stripe", body, wide=True)
