#!/usr/bin/python3
"""Writes the seed corpora of the libFuzzer targets in tests/fuzz/.

The frames are built from docs/wire-format.md and docs/protocol-handshake.md
alone, independently of the C++ encoder, so that the seeds double as a check
that the documents describe what the decoder accepts. Run once after a format
change and commit the result:

    /usr/bin/python3 scripts/make-fuzz-corpus.py
"""

import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")

MAGIC = b"TNDM"
VERSION = 1
HELLO, CHALLENGE, PROOF, WELCOME = 1, 2, 3, 4
KV_FIRST = 128
RESPONSE, ERROR = 1, 2


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283


def frame(msg_type, meta=b"", payload=b"", flags=0, sender=-1, recipient=-1,
          message_id=0, request_id=0, version=VERSION):
    """One frame: the 64-byte header of docs/wire-format.md, meta, payload."""
    head = MAGIC + struct.pack("<HHIiiIQQQ", version, msg_type, flags, sender, recipient,
                               len(meta), message_id, request_id, len(payload))
    head += bytes(12)  # reserved, bytes 48..59
    assert len(head) == 60
    return head + struct.pack("<I", crc32c(head)) + meta + payload


def hello_meta(job_id: bytes, nonce: bytes = bytes(range(32)), version=VERSION):
    return struct.pack("<HI", version, len(job_id)) + job_id + nonce


def wire_seed(options, chunks, stream):
    """Input of wire_decoder_fuzz: options, chunk count, chunk sizes, stream."""
    return bytes([options, len(chunks)]) + bytes(c - 1 for c in chunks) + stream


def write(target, name, data):
    folder = os.path.join(CORPUS, target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def main():
    mixed = (frame(KV_FIRST, b"key=7", bytes(range(40)), flags=RESPONSE, sender=2,
                   recipient=0, message_id=11, request_id=5)
             + frame(KV_FIRST + 1)
             + frame(200, b"", b"\xff" * 9, sender=0, recipient=3, message_id=12)
             + frame(70, b"error: no such key", flags=RESPONSE | ERROR, sender=1, recipient=2))
    w = "wire_decoder_fuzz"
    write(w, "empty_frame", wire_seed(0x00, [], frame(KV_FIRST)))
    write(w, "mixed_frames_small_chunks", wire_seed(0x04, [1, 7, 64], mixed))
    write(w, "mixed_frames_wrong_size_posting", wire_seed(0x28, [13], mixed))
    write(w, "large_payload_direct_read",
          wire_seed(0x3C, [200], frame(KV_FIRST + 2, b"m" * 10, bytes(i % 251 for i in range(3000)))))
    write(w, "meta_only_tiny_staging", wire_seed(0x00, [], frame(64, b"x" * 150)))
    write(w, "handshake_then_data",
          wire_seed(0x84, [], frame(HELLO, hello_meta(b"job")) + frame(KV_FIRST, b"m", b"pp")))
    write(w, "other_version", wire_seed(0x00, [], frame(KV_FIRST, version=2)))

    h = "handshake_fuzz"
    server, client = 0x00 | (63 << 1), 0x01 | (63 << 1)  # 64-byte chunks
    write(h, "server_hello", bytes([server]) + frame(HELLO, hello_meta(b"fuzz-job")))
    write(h, "server_hello_proof", bytes([server]) + frame(HELLO, hello_meta(b"fuzz-job"))
          + frame(PROOF, b"p" * 32))
    write(h, "server_hello_other_job", bytes([0x00]) + frame(HELLO, hello_meta(b"other-job")))
    write(h, "server_proof_first", bytes([server]) + frame(PROOF, b"p" * 32))
    write(h, "client_challenge_welcome", bytes([client]) + frame(CHALLENGE, b"n" * 32 + b"s" * 32)
          + frame(WELCOME))
    return 0


if __name__ == "__main__":
    sys.exit(main())
