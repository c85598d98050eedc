"""Message ids: offsetMsgId (store host + commitlog offset) and UNIQ_KEY."""
from __future__ import annotations

from jobs.formats import msgid


def test_offset_msg_id_round_trip_ipv4_and_ipv6() -> None:
    assert msgid.offset_msg_id("192.168.1.101:10911", 223080) == "C0A8016500002A9F0000000000036768"
    assert msgid.parse_offset_msg_id("C0A8016500002A9F0000000000036768") == ("192.168.1.101", 10911, 223080)
    v6 = msgid.offset_msg_id("2001:db8::7:10911", 5)
    assert len(v6) == 56 and msgid.parse_offset_msg_id(v6) == ("2001:db8::7", 10911, 5)


def test_uniq_key_layout() -> None:
    key = msgid.make_uniq_key("10.0.0.5", 4242, 0x1B4AAC28, 123456, 7)
    assert key == "0A00000510921B4AAC280001E2400007" and len(key) == 32
    assert msgid.uniq_key_ip(key) == "10.0.0.5"
    # a real key (queryMsgByOffset fixture): pid 0x8410 and 0x8A9BE9B5 ms into the month use the top bits
    assert msgid.make_uniq_key("127.0.0.1", 0x8410, 0x18B4AAC2, 0x8A9BE9B5, 0) == "7F000001841018B4AAC28A9BE9B50000"
