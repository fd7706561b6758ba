"""The canonical form of an e-mail address: the mailbox that mail to it reaches, as far as that
can be told from the address alone. Many accounts can share one canonical form (sign-up keeps
the addresses themselves unique); the trial credit is given once per canonical form, so the
aliases of one mailbox (`a+1@`, `a.b@gmail.com`, `a@googlemail.com`) do not farm it."""

import unicodedata

import idna

# Providers whose other domains are true aliases: the same name at each of them is the same
# mailbox, and nobody else can hold it, so folding them merges no two people.
# - googlemail.com: Gmail's name in Germany and the UK until 2012; every Gmail account answers
#   at both domains.
# - me.com, mac.com: Apple's older mail domains. An account that has one of them has the name at
#   @icloud.com as well, and the three share one namespace.
# Deliberately NOT folded, because they are separate mailboxes or not derivable from the address:
# - hotmail.com / outlook.com / live.com / msn.com: separate namespaces at Microsoft
#   (a@hotmail.com and a@outlook.com can be two people);
# - yahoo.com / ymail.com / rocketmail.com: separate namespaces;
# - qq.com / foxmail.com / vip.qq.com: a QQ mailbox answers at 12345@qq.com and at an English
#   alias chosen by its owner (name@qq.com, name@foxmail.com); which number belongs to which alias
#   cannot be derived, and the alias namespaces are not the same;
# - 163.com / 126.com / yeah.net (NetEase), sina.com / sina.cn: separate mailboxes.
ALIAS_DOMAINS = {
    "googlemail.com": "gmail.com",
    "me.com": "icloud.com",
    "mac.com": "icloud.com",
}
# Providers that ignore dots in the name: Gmail (a.b@gmail.com is ab@gmail.com). Nobody else
# among the big providers does (Outlook, Yahoo, iCloud, QQ and NetEase keep them).
DOTLESS_DOMAINS = {"gmail.com"}
# Sub-addressing (RFC 5233): mail to name+tag@ reaches name@. It is dropped at every domain:
# Gmail, Outlook, iCloud, Fastmail, Proton and a default Postfix (`recipient_delimiter = +`) all
# deliver that way, and the few mailboxes whose name really holds a "+" lose only the trial.
# A "-" is not treated as a tag: it is part of very many real names (li-lei@), and Yahoo's
# "base-keyword" addresses are not derived from the mailbox's name anyway.
TAG_SEPARATOR = "+"
MAX_LENGTH = 320  # a 64-character name, "@" and a 253-character domain, with room to spare


def canonical_email(address: str) -> str:
    """The canonical form of `address`: lower case; the domain in its ASCII (punycode) form
    after UTS-46 mapping (`BÜCHER.example` → `xn--bcher-kva.example`, full-width letters and
    dots mapped); the name NFKC-normalised (full-width `ｌｉ` → `li`) with any `+tag` dropped;
    for Gmail the dots of the name dropped; alias domains folded (ALIAS_DOMAINS). Raises
    ValueError for an address that has no such form (no "@", an empty part, a domain that is
    not a valid internationalised name, an absurd length)."""
    name, at, domain = address.strip().rpartition("@")
    if not at or not name or not domain:
        raise ValueError("an e-mail address has a name, '@' and a domain")
    name = unicodedata.normalize("NFKC", name).lower()
    domain = _canonical_domain(domain)
    tagless = name.split(TAG_SEPARATOR, 1)[0]
    if tagless:  # "+tag@" alone is a name, not a tag
        name = tagless
    domain = ALIAS_DOMAINS.get(domain, domain)
    if domain in DOTLESS_DOMAINS:
        name = name.replace(".", "") or name
    canonical = f"{name}@{domain}"
    if len(canonical) > MAX_LENGTH:
        raise ValueError("the address is too long")
    return canonical


def _canonical_domain(domain: str) -> str:
    domain = domain.rstrip(".")
    if domain.startswith("["):  # an address literal, [192.0.2.1]
        return domain.lower()
    if domain.isascii():
        # Already in its ASCII form; IDNA 2008's stricter label rules (no "--" in the 3rd and
        # 4th place) must not refuse a host name that DNS accepts.
        return domain.lower()
    try:
        return idna.encode(domain, uts46=True).decode("ascii")
    except idna.IDNAError as error:
        raise ValueError(f"not a valid internationalised domain: {error}") from None
