"""A Horovod-shaped script's start: it reads horovodrun's variables (no
tandem import) and prints them in one line that the test checks exactly."""

import os

names = ["HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE"]
print("horovod: " + " ".join(f"{n}={os.environ[n]}" for n in names), flush=True)
