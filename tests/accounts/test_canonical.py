import pytest

from starverse.accounts.canonical import canonical_email


@pytest.mark.parametrize(
    ("address", "canonical"),
    [
        # lower case, spaces around dropped
        ("  Li.Lei@PKU.edu.cn ", "li.lei@pku.edu.cn"),
        # a +tag is dropped at every domain, dots elsewhere than Gmail are kept
        ("li.lei+trial@pku.edu.cn", "li.lei@pku.edu.cn"),
        ("a+1@lab.example", "a@lab.example"),
        ("a+1+2@lab.example", "a@lab.example"),
        ("a+@lab.example", "a@lab.example"),
        ("+tag@lab.example", "+tag@lab.example"),  # nothing before the "+": a name, not a tag
        ("li-lei@lab.example", "li-lei@lab.example"),  # a "-" is part of the name
        ("a.b+x@outlook.com", "a.b@outlook.com"),
        # Gmail: dots of the name dropped, googlemail.com is gmail.com
        ("A.B.C@gmail.com", "abc@gmail.com"),
        ("a.b+farm@GMAIL.COM", "ab@gmail.com"),
        ("a.b@googlemail.com", "ab@gmail.com"),
        ("..ab..@gmail.com", "ab@gmail.com"),
        # Apple's older domains are the same names at icloud.com
        ("li.lei@me.com", "li.lei@icloud.com"),
        ("li.lei+x@mac.com", "li.lei@icloud.com"),
        # separate mailboxes stay separate
        ("a@hotmail.com", "a@hotmail.com"),
        ("a@live.com", "a@live.com"),
        ("a.b@yahoo.com", "a.b@yahoo.com"),
        ("name@foxmail.com", "name@foxmail.com"),
        ("12345@qq.com", "12345@qq.com"),
        ("li.lei@163.com", "li.lei@163.com"),
        ("li.lei@126.com", "li.lei@126.com"),
        ("li.lei@yeah.net", "li.lei@yeah.net"),
        # internationalised domains in their punycode form, after UTS-46 mapping
        ("hans@bücher.example", "hans@xn--bcher-kva.example"),
        ("hans@BÜCHER.example", "hans@xn--bcher-kva.example"),
        ("hans@xn--bcher-kva.example", "hans@xn--bcher-kva.example"),
        ("a@例え.テスト", "a@xn--r8jz45g.xn--zckzah"),
        ("a@faß.de", "a@xn--fa-hia.de"),  # IDNA 2008: not fass.de
        # full-width characters: the name NFKC-normalised, the domain mapped
        ("ｌｉ．ｌｅｉ＋ｘ@pku.edu.cn", "li.lei@pku.edu.cn"),
        ("ＬＩＬＥＩ@pku.edu.cn", "lilei@pku.edu.cn"),
        ("a.b@ｇｍａｉｌ.com", "ab@gmail.com"),
        ("ab@gmail．com", "ab@gmail.com"),
        # a trailing dot of the domain, an address literal, an ASCII host name IDNA 2008 dislikes
        ("a@lab.example.", "a@lab.example"),
        ("a@[192.0.2.1]", "a@[192.0.2.1]"),
        ("a@ab--cd.example", "a@ab--cd.example"),
    ],
)
def test_canonical_email(address, canonical):
    assert canonical_email(address) == canonical


@pytest.mark.parametrize(
    "address",
    ["no-at-sign", "@lab.example", "a@", "a@☃.net", "a@bad..dots.例え", "x" * 320 + "@lab.example"],
)
def test_an_address_without_a_canonical_form_is_refused(address):
    with pytest.raises(ValueError):
        canonical_email(address)
