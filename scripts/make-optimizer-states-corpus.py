#!/usr/bin/python3
"""Writes the seed corpus of tests/fuzz/optimizer_states_fuzz.cc.

The blobs are built from docs/optimizers.md ("Saved states") alone, so the
seeds double as a check that the document describes what LoadStates
accepts. Run after a format change and commit the result:

    /usr/bin/python3 scripts/make-optimizer-states-corpus.py
"""

import os
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fuzz", "corpus", "optimizer_states_fuzz")

F32, F64, F16 = 0, 1, 2
SIZE = {F32: 4, F64: 8, F16: 2}
SEAL = 8  # byte 0, bit 3: the target appends the checksum


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def key(k, dtype, master, count, elements, arrays):
    state = F32 if master else dtype
    out = struct.pack("<QBBBqQI", k, dtype, 1 if master else 0, state, count, elements, arrays)
    if master:
        out += struct.pack("<%df" % elements, *[0.5 * i for i in range(elements)])
    for a in range(arrays):
        out += bytes((a + i) % 7 for i in range(elements * SIZE[state]))
    return out


def body(name, num_update, keys, schedule=None):
    out = struct.pack("<IH", 0x5453504F, 1)
    out += struct.pack("<I", len(name)) + name.encode()
    out += struct.pack("<q", num_update)
    if schedule is None:
        out += b"\x00"
    else:
        out += b"\x01" + struct.pack("<Bdqq", *schedule)
    out += struct.pack("<Q", len(keys)) + b"".join(keys)
    return out


SEEDS = {
    # config index | SEAL, body
    "sgd_plain": (0 | SEAL, body("sgd", 3, [key(1, F32, False, 3, 2, 0)])),
    "sgd_momentum": (1 | SEAL, body("sgd", 2, [key(1, F32, False, 2, 3, 1), key(9, F32, False, 1, 0, 1)])),
    "nag_master": (2 | SEAL, body("nag", 1, [key(4, F16, True, 1, 5, 1)])),
    "adam_two_keys": (3 | SEAL, body("adam", 5, [key(1, F32, False, 5, 4, 2), key(2, F64, False, 2, 3, 2)])),
    "adam_master_factor": (4 | SEAL, body("adam", 3, [key(2, F16, True, 3, 3, 2)], (1, 0.005, 2, 0))),
    "rmsprop_centered_f16": (6 | SEAL, body("rmsprop", 1, [key(3, F16, False, 1, 6, 3)])),
    "rmsprop_multifactor": (7 | SEAL, body("rmsprop", 6, [key(3, F32, False, 6, 2, 1)], (2, 0.00025, 5, 2))),
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, (selector, blob) in SEEDS.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(bytes([selector]) + blob)
    # One raw blob with its checksum, as SaveStates writes it.
    raw = body("adagrad", 2, [key(1, F32, False, 2, 3, 1)])
    with open(os.path.join(OUT, "adagrad_raw"), "wb") as f:
        f.write(bytes([5]) + raw + struct.pack("<I", crc32c(raw)))


if __name__ == "__main__":
    main()
