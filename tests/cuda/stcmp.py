# Two safetensors checkpoints hold the same tensors and metadata (the pair id, random per save,
# aside): exit 0, else 1. Usage: stcmp.py A B
import json, struct, sys
def load(p):
    b = open(p, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n])
    h['__metadata__'].pop('pair_id', None)
    return h, b[8 + n:]
a, b = load(sys.argv[1]), load(sys.argv[2])
sys.exit(0 if a == b else 1)
