"""Forks and execs (dftracer 2.2.0 test workload): the parent writes a file; a first child reads
it and execs /bin/cat on it; a second child exits at once without any I/O (dftracer leaves an
empty .pfw.gz for it). usage: fork_exec.py DATA_DIR"""
import os
import sys

d = sys.argv[1]
path = os.path.join(d, "parent.txt")
with open(path, "w") as f:
    f.write("hello from the parent\n" * 10)
pid = os.fork()
if pid == 0:
    with open(path) as f:
        f.read()
    os.execv("/bin/cat", ["cat", path])
os.waitpid(pid, 0)
pid = os.fork()
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
