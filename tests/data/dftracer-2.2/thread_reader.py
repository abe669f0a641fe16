"""Two reader threads (dftracer 2.2.0 test workload): each reads its own 8 files of 64 KiB in
16 KiB chunks. usage: thread_reader.py DATA_DIR"""
import os
import sys
import threading

d = sys.argv[1]
for t in range(2):
    for i in range(8):
        p = os.path.join(d, "t%d_%d.bin" % (t, i))
        if not os.path.exists(p):
            with open(p, "wb") as f:
                f.write(bytes([t * 8 + i]) * 65536)


def reader(t, out):
    n = 0
    for i in range(8):
        with open(os.path.join(d, "t%d_%d.bin" % (t, i)), "rb", buffering=0) as f:
            while True:
                b = f.read(16384)
                if not b:
                    break
                n += len(b)
    out[t] = n


out = [0, 0]
th = [threading.Thread(target=reader, args=(t, out)) for t in range(2)]
for x in th:
    x.start()
for x in th:
    x.join()
print("bytes", sum(out))
