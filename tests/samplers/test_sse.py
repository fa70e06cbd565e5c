"""`SSEDecoder` against the WHATWG event-stream rules, fed whole and split at every byte."""

from __future__ import annotations

import pytest

from agentcore_rl_harness.samplers._sse import SSEDecoder, ServerSentEvent


def decode_whole(data: bytes) -> list[ServerSentEvent]:
    return SSEDecoder().feed(data)


def decode_split(data: bytes, *cuts: int) -> list[ServerSentEvent]:
    decoder, events, start = SSEDecoder(), [], 0
    for cut in (*cuts, len(data)):
        events += decoder.feed(data[start:cut])
        start = cut
    return events


STREAM = (b"\xef\xbb\xbfdata: {\"a\":\r\ndata:  1}\r\n\r\n"  # BOM, CRLF, two data lines, an extra space kept
          b": keep-alive\n\n"  # a comment alone is no event
          b"event: error\rdata: boom\r\r"  # CR line ends, a named event
          b"id: 7\nretry: 250\ndata\n\n"  # a field without a colon: data is ""
          b"event: lonely\n\n"  # no data line: not an event
          b"data:no-space\nunknown: x\n\n"
          b"data: cut off at the end")  # never finished: discarded


EXPECTED = [ServerSentEvent(data='{"a":\n 1}'), ServerSentEvent(data="boom", event="error"),
            ServerSentEvent(data="", id="7", retry=250), ServerSentEvent(data="no-space", id="7", retry=250)]


def test_spec_rules_on_the_whole_stream():
    assert decode_whole(STREAM) == EXPECTED


@pytest.mark.parametrize("cut", range(1, len(STREAM)))
def test_any_chunk_boundary_gives_the_same_events(cut):
    assert decode_split(STREAM, cut) == EXPECTED


def test_byte_at_a_time_and_crlf_split_between_chunks():
    assert decode_split(STREAM, *range(1, len(STREAM))) == EXPECTED
    # a CR ending one chunk and the LF opening the next are one line end, not a blank line
    assert decode_split(b"data: a\r\ndata: b\r\n\r\n", 8) == [ServerSentEvent(data="a\nb")]


def test_events_arrive_as_soon_as_their_blank_line_does():
    decoder = SSEDecoder()
    assert decoder.feed(b"data: 1\n") == []
    assert decoder.feed(b"\ndata: 2") == [ServerSentEvent(data="1")]
    assert decoder.feed(b"\n\n") == [ServerSentEvent(data="2")]


def test_invalid_utf8_is_replaced_not_raised():
    assert decode_whole(b"data: \xff\n\n") == [ServerSentEvent(data="\ufffd")]


def test_a_long_line_over_many_chunks_is_one_event():
    """A 1 MB `data:` line (a cumulative SGLang event late in a long reply) in 1 KB pieces, with
    a CRLF split across the last two chunks."""
    line = b"data: " + b"x" * 1_000_000 + b"\r\n\r\n"
    head, end = line[:-3], line[-3:]  # head ends in CR, end opens with its LF
    decoder = SSEDecoder()
    events = [event for i in range(0, len(head), 1024) for event in decoder.feed(head[i:i + 1024])]
    assert events == []
    assert decoder.feed(end) == [ServerSentEvent(data="x" * 1_000_000)]
