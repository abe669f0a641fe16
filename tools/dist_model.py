#!/usr/bin/env python3
"""Communication and memory model of scaffold's spatial parallelism (docs/dist.md).

For the ScaFFold U-Net (levels L = problem_scale - unet_bottleneck_dim, base channels C0,
channels C0 * 2^i at level i, K classes) trained with batch 1 per replica on a volume of side
V = 2^problem_scale split into kd x kh x kw blocks, this computes per rank and per optimizer
step exactly what src/parallel sends:

  halo    every Conv3d k3 exchanges one voxel plane per side of each sharded axis: the input
          in the forward pass, the input again and the output gradient in the backward pass
          (not for the first convolution, whose input gradient is not needed). A face along D
          spans (H+2)(W+2) voxels of the padded block, along H (D+2)(W+2), along W (D+2)(H+2).
          An interior block sends two faces per sharded axis, a boundary block one.
  gn      GroupNorm with global statistics: per GroupNorm and sample two sums of G+1 doubles
          forward and one of 2G+1 backward, over the T ranks of the spatial group.
  loss    one sum of 4 + 3K doubles per training step (CE numerator/denominator, Dice terms).
          (gn and loss together: sums_bytes; an all-reduce of a few hundred bytes costs its
          latency, log2 T message rounds, not its bytes.)
  grad    the gradient all-reduce over all ranks: a ring all-reduce moves 2 (n-1)/n x 4P bytes
          per rank (P parameters), whatever the layout.

and the activation memory of one rank: nn_unet.activation_floats, the engine's activation slab
(the tensors the backward pass keeps, the gradient buffers, and the workspace of the largest
layer: a convolution's zero-padded input, plus its weight-gradient copies and thread panels),
mirrored from src/nn/unet.c and src/nn/conv.c, split into what shrinks with the block and what
does not.

  python3 tools/dist_model.py table              the docs/dist.md tables (scales 7-11, 8 to 4,096
                                                 ranks)
  python3 tools/dist_model.py point D H W C0 L KD KH KW
                                                 halo MiB per step of the busiest rank, params,
                                                 activation MiB per rank and its bound (checked
                                                 by bench/dist/run.sh against bench_dist's
                                                 counters)
"""
import math
import sys

K = 6       # n_categories 5 + background (upstream default)
G = 8       # group_norm_groups
C_IN = 3


def convs(c0, L):
    """(level, cin, cout, needs_input_grad) of every Conv3d k3 of the U-Net."""
    ch = [c0 << i for i in range(L + 1)]
    out = [(0, C_IN, ch[0], False), (0, ch[0], ch[0], True)]
    for i in range(1, L + 1):
        out += [(i, ch[i - 1], ch[i], True), (i, ch[i], ch[i], True)]
    for lvl in range(L - 1, -1, -1):
        out += [(lvl, 2 * ch[lvl], ch[lvl], True), (lvl, ch[lvl], ch[lvl], True)]
    return out


def params(c0, L):
    ch = [c0 << i for i in range(L + 1)]
    p = 0
    for _, cin, cout, _ in convs(c0, L):
        p += 27 * cin * cout + 2 * cout  # conv weight + the GroupNorm after it
    for lvl in range(L):
        p += 8 * ch[lvl + 1] * ch[lvl] + ch[lvl]  # ConvTranspose weight + bias
    return p + ch[0] * K + K


def halo_floats(D, H, W, c0, L, shards, train=True):
    """Floats sent in one step by the busiest block: two neighbours on an axis with more than
    two shards, one with two."""
    ext = [D // shards[0], H // shards[1], W // shards[2]]
    total = 0
    for lvl, cin, cout, need_din in convs(c0, L):
        e = [x >> lvl for x in ext]
        chans = cin + ((cin + (cout if need_din else 0)) if train else 0)
        for a in range(3):
            if shards[a] > 1:
                o = [e[b] + 2 for b in range(3) if b != a]
                total += min(2, shards[a] - 1) * o[0] * o[1] * chans
    return total


def sums(T, c0, L):
    """(bytes, all-reduces) of the GroupNorm and loss sums one rank contributes per step."""
    if T == 1:
        return 0, 0
    n_gn = len(convs(c0, L))
    return 8 * (n_gn * (2 * (G + 1) + (2 * G + 1)) + 4 + 3 * K), 3 * n_gn + 1


def valid(V, L, sh):
    """Every level's block even and the bottleneck block >= 2 voxels (the benchmark's check)."""
    return all(V % (s << L) == 0 and (V // s) >> L >= 2 for s in sh)


# The engine's workspace constants (src/nn/conv.c): slab budget of an unsharded convolution's
# padded copy, weight-gradient copies budget and cap, per-thread panel budget, thread slots.
SLAB_BYTES = 48 << 20
DW_REPLICA_BUDGET, DW_REPLICAS_MAX = 64 << 20, 8
TW_SCRATCH, TW_ROWS_MAX, MAX_THREADS, TG_MR_MAX = 65536, 256, 64, 16
TW_CT_SCRATCH = 196608


def up16(n):
    return (n + 15) & ~15


def ncol_max(n):
    """nn_gemm_ncol_max: columns padded to the kernels' widest block (16 on AVX2/AVX-512)."""
    return -(-n // 16) * 16


def tw_chunk_rows(H, W, ncol, T=27, K=0):
    """Rows per chunk: T = 27 Conv3d, T = 8 ConvTranspose3d (K input channels)."""
    if T == 8:
        vox = min(256, TW_CT_SCRATCH // (K + 2 * ncol_max(ncol)))
        return max(1, min(vox // W, TW_ROWS_MAX))
    vox = min(256, TW_SCRATCH // ncol_max(ncol))
    R = max(1, min(vox // W, TW_ROWS_MAX))
    if R >= H:
        return R // H * H
    while H % R:
        R -= 1
    return R


def weight_grad_ws(T, K, ncol, nrows, H, W):
    """Weight gradient: the packed gradient and its per-thread copies, and every thread slot's
    packed panels (a chunk's G, and the padded input block of one k block). Depends on the
    layer, not on how the volume is split."""
    dw = T * K * ncol_max(ncol)
    cr = tw_chunk_rows(H, W, ncol, T, K)
    chunks = -(-nrows // cr)
    r = min(DW_REPLICA_BUDGET // (4 * dw), DW_REPLICAS_MAX, chunks // 4)
    R = min(cr, nrows)
    if T == 8:  # the chunk's input and two taps' G panels
        panel = up16(R * W * (K + 2 * ncol_max(ncol)))
    else:  # G panels and the padded input block of one k block
        nz, ny = (R // H, H) if R >= H else (1, R)
        panel = up16(R * W * ncol_max(ncol) + 3 * nz * (ny + 2) * (W + 2) * TG_MR_MAX)
    return dw * (r + 1 if r > 1 else 1) + MAX_THREADS * panel


def slab_depth(D, H, W, C, sharded):
    """Planes of a convolution's padded copy: the whole block when sharded (the halo exchange
    fills its border), else slabs of about SLAB_BYTES."""
    if sharded:
        return D
    return max(1, min(D, SLAB_BYTES // ((H + 2) * (W + 2) * C * 4) - 2))


WINO_CHUNK_BYTES, WINO_DW_CHUNK_BYTES = 6 << 20, 48 << 20
WINO_KMAX, WINO_VOX_MIN, WINO_LDPAD, WINO_NXI = 256 * 320, 4096, 16, 144


def wino_applies(D, H, W, K, ncol, sharded):
    """conv.c wino_applies (fp32): Winograd for unsharded, large enough layers, D even, H and W
    multiples of 4."""
    return (not sharded and D % 2 == 0 and H % 4 == 0 and W % 4 == 0 and K >= 8 and ncol >= 8
            and K * ncol <= WINO_KMAX and D * H * W >= WINO_VOX_MIN
            and slab_depth(D, H, W, K, False) >= 2)


def wino_dw_chunk_bytes(K, ncp):
    """conv_wino.c wino_dw_chunk_bytes: 2.5 times dU, between 6 and 48 MiB."""
    return min(max(4 * WINO_NXI * K * ncp * 5 // 2, WINO_CHUNK_BYTES), WINO_DW_CHUNK_BYTES)


def wino_ws(K, ncol):
    """conv.c wino_ws_floats: transformed weights of up to two parts and one chunk of tiles."""
    ncp = ncol_max(ncol) + 64
    return (WINO_NXI * K * ncp
            + max(wino_dw_chunk_bytes(K, ncp) // 4, WINO_NXI * (16 * (K + ncp) + 2 * WINO_LDPAD))
            + 64)


WINO_SMALL_TILES, WINO_SMALL_MIN, WINO_SMALL_UBYTES = 32, 16, 448 << 10
WINO_SMALL_SLOT = (WINO_SMALL_UBYTES // 4) // WINO_NXI * (WINO_NXI + 27)


def wino_tiles(D, H, W):
    return (D // 2) * (H // 4) * (W // 4)


def wino_small_group(n, D, H, W):
    """conv.c wino_small_group: whole samples per group of at most WINO_SMALL_TILES tiles."""
    return max(1, min(n, WINO_SMALL_TILES // wino_tiles(D, H, W)))


def wino_small_applies(n, D, H, W, K, ncol, sharded):
    """conv.c wino_small_applies: Winograd on few tiles (16 to 32 per group of samples)."""
    return (not sharded and D % 2 == 0 and H % 4 == 0 and W % 4 == 0 and K >= 8 and ncol >= 8
            and D * H * W < WINO_VOX_MIN and 0 < wino_tiles(D, H, W) <= WINO_SMALL_TILES
            and wino_small_group(n, D, H, W) * wino_tiles(D, H, W) >= WINO_SMALL_MIN)


def wino_small_ws(n, D, H, W, K, ncol):
    """conv.c wino_small_ws_floats: a padded sample, a group's V and M, and every thread slot's
    chunk."""
    nt = wino_small_group(n, D, H, W) * wino_tiles(D, H, W)
    ncp = ncol_max(ncol) + 64
    v = WINO_NXI * (nt * K + (K // 8 + 1) * WINO_LDPAD)
    m = WINO_NXI * (nt * ncp + (ncp // 4) * WINO_LDPAD)
    return (up16((D + 2) * (H + 2) * (W + 2) * K) + up16(v) + up16(m)
            + MAX_THREADS * WINO_SMALL_SLOT + 64)


def pad_floats(D, H, W, C, sharded):
    return (slab_depth(D, H, W, C, sharded) + 2) * (H + 2) * (W + 2) * ((C + 1) & ~1)


def conv3d_ws(D, H, W, cin, cout, sharded, n=1):
    """(padded copy, the rest) of a Conv3d k3's workspace (nn_conv3d_ws_floats[_sh])."""
    pad = max(pad_floats(D, H, W, cin, sharded), pad_floats(D, H, W, cout, sharded))
    rest = max(ncol_max(cout) * (cin + 1) * 27, ncol_max(cin) * (cout + 1) * 27,
               weight_grad_ws(27, cin, cout, slab_depth(D, H, W, cin, sharded) * H, H, W))
    if wino_applies(D, H, W, cin, cout, sharded):
        rest = max(rest, wino_ws(cin, cout))
    if wino_applies(D, H, W, cout, cin, sharded):
        rest = max(rest, wino_ws(cout, cin))
    if wino_small_applies(n, D, H, W, cin, cout, sharded):
        rest = max(rest, wino_small_ws(n, D, H, W, cin, cout))
    if wino_small_applies(n, D, H, W, cout, cin, sharded):
        rest = max(rest, wino_small_ws(n, D, H, W, cout, cin))
    return pad, rest + 80


def act_parts(D, H, W, c0, L, sharded, n=1):
    """nn_unet.activation_floats of src/nn/unet.c (plan_slabs: fp32, no checkpointing, batch n)
    for a block of D x H x W, as (the voxel tensors and the padded copy, the rest) in floats.
    The rest does not shrink with the block: GroupNorm statistics, and the workspace beyond its
    padded copy (weight-gradient copies, thread panels, packed weights). The workspace is the
    largest layer's: a Conv3d's or a ConvTranspose3d's (the loss, GroupNorm and 1x1 convolution
    workspaces, under 1 MiB, are never the largest at these sizes)."""
    ch = [c0 << i for i in range(L + 1)]
    S = [(D >> i) * (H >> i) * (W >> i) for i in range(L + 1)]
    f = 0
    stats = 4 * up16(n * G) * (2 * L + 1)      # per DoubleConv block: 4 GroupNorm statistics
    # SCAFFOLD_NN_KEEP_A1=auto (unet_plan.c): each block's a1 kept where all of them take at
    # most 256 MiB a sample
    keep_a1 = sum((2 if i < L else 1) * S[i] * ch[i] * 4 for i in range(L + 1)) <= 256 * 2**20
    for lvl, _, cout, _ in convs(c0, L)[::2]:  # and c1, c2, a2 (and a1 where kept)
        f += (4 if keep_a1 else 3) * up16(n * S[lvl] * cout)
    for i in range(1, L + 1):                  # pooled inputs
        f += up16(n * S[i] * ch[i - 1])
    for lvl in range(L):                       # ConvTranspose outputs
        f += up16(n * S[lvl] * ch[lvl])
    f += up16(n * S[L] * ch[L])                # the bottleneck's gradient (the others reuse a2)
    f += up16(n * S[0] * C_IN) + 2 * up16(n * S[0] * K)  # input, logits and their gradient
    f += 2 * up16(n * S[0] * ch[0])                         # two top-level scratch tensors
    f += up16(n * S[1] * ch[1])  # the up blocks' incoming gradient (the top one's is in place)
    best = (0, 0)
    for lvl, cin, cout, _ in convs(c0, L):
        best = max(best, conv3d_ws(D >> lvl, H >> lvl, W >> lvl, cin, cout, sharded, n), key=sum)
    for lvl in range(L):
        d, h, w = D >> (lvl + 1), H >> (lvl + 1), W >> (lvl + 1)
        ct = max(ncol_max(ch[lvl]) * ch[lvl + 1] * 8, ncol_max(ch[lvl + 1]) * ch[lvl] * 8,
                 weight_grad_ws(8, ch[lvl + 1] + 1, ch[lvl], n * d * h, h, w), 64 * ch[lvl])
        best = max(best, (0, ct + ncol_max(ch[lvl]) + 64), key=sum)
    pad = best[0]
    return f + pad, stats + up16(pad + best[1]) - pad


def act_floats(D, H, W, c0, L, sharded=False, n=1):
    return sum(act_parts(D, H, W, c0, L, sharded, n))


def index_bytes(D, H, W, c0, L, n=1):
    """MaxPool argmax bytes (nn_unet.activation_index_bytes): one per pooled value."""
    return sum((n * (D >> i) * (H >> i) * (W >> i) * (c0 << (i - 1)) + 63) & ~63
               for i in range(1, L + 1))


def act_split(D, H, W, c0, L, sh):
    """Activation MiB per rank of the layout sh, and its parts against the unsharded model's:
    unsharded / T; the halo the rank holds (the faces its neighbours send into the padded copy
    of the widest convolution, one per neighbour: two on an axis of three or more shards, one
    with two); the part that does not shrink with the block (act_parts) beyond its 1/T share.
    bound = the sum of those three."""
    T = sh[0] * sh[1] * sh[2]
    ext = [D // sh[0], H // sh[1], W // sh[2]]
    vox, rest = act_parts(*ext, c0, L, T > 1)
    one = act_floats(D, H, W, c0, L, False) / T
    # The convolution with the largest padded copy (the top up block's, at these sizes).
    _, lvl, C = max((pad_floats(ext[0] >> l, ext[1] >> l, ext[2] >> l, cin, True), l, cin)
                    for l, cin, _, _ in convs(c0, L))
    halo = 0
    for a in range(3):
        if sh[a] > 1:
            o = [(ext[b] >> lvl) + 2 for b in range(3) if b != a]
            halo += min(2, sh[a] - 1) * o[0] * o[1] * ((C + 1) & ~1)
    fixed = rest - act_parts(D, H, W, c0, L, False)[1] / T
    mib = lambda f: 4 * f / 2**20
    return mib(vox + rest), mib(one), mib(halo), mib(fixed), mib(one + halo + fixed)


def point(args):
    D, H, W, c0, L, kd, kh, kw = map(int, args)
    sh = (kd, kh, kw)
    act, one, halo, fixed, bound = act_split(D, H, W, c0, L, sh)
    print(f"model D {D} H {H} W {W} C0 {c0} L {L} shards {kd},{kh},{kw} "
          f"halo_mib_per_step {4 * halo_floats(D, H, W, c0, L, sh) / 2**20:.2f} "
          f"sums_bytes_per_step {sums(kd * kh * kw, c0, L)[0]} "
          f"params {params(c0, L)} act_mib_per_rank {act:.2f} act_unsharded_per_shard_mib "
          f"{one:.2f} act_halo_mib {halo:.2f} act_fixed_mib {fixed:.2f} act_bound_mib {bound:.2f}")


def flops(D, H, W, c0, L):
    """Forward FLOPs of one sample (convolutions; GroupNorm, ReLU, pooling are negligible)."""
    ch = [c0 << i for i in range(L + 1)]
    f = 0
    for lvl, cin, cout, _ in convs(c0, L):
        f += 2 * 27 * cin * cout * (D >> lvl) * (H >> lvl) * (W >> lvl)
    for lvl in range(L):
        f += 2 * 8 * ch[lvl + 1] * ch[lvl] * (D >> (lvl + 1)) * (H >> (lvl + 1)) * (W >> (lvl + 1))
    return f + 2 * ch[0] * K * D * H * W


def fmt_bytes(b):
    for unit, sc in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if b >= sc:
            return f"{b / sc:.3g} {unit}"
    return f"{b:.0f} B"


def fmt_s(t):
    return f"{t:.3g} s" if t >= 1 else f"{t * 1e3:.3g} ms"


# The machine assumed for the projection (docs/dist.md states it): per rank 20 TFLOP/s of
# convolution, 25 GB/s and 5 us per message on the network, 64 GiB of memory.
RATE, BW, LAT, MEM = 20e12, 25e9, 5e-6, 64 * 2**30
N_TRAIN = 507  # upstream defaults: 5 classes x 145 instances, 30% validation


def layouts(n):
    """Spatial groups T = 2^k split D first, then H, then W, up to n ranks."""
    sh, out = [1, 1, 1], [(1, 1, 1)]
    a = 0
    while sh[0] * sh[1] * sh[2] * 2 <= n:
        sh[a] *= 2
        a = (a + 1) % 3
        out.append(tuple(sh))
    return out


def step_model(V, c0, L, n, sh):
    """None if the layout does not fit on n ranks, else (epoch seconds, halo bytes, sums bytes,
    gradient bytes) per rank and step."""
    T = sh[0] * sh[1] * sh[2]
    R = n // T
    P = params(c0, L)
    if R > N_TRAIN or R < 1 or not valid(V, L, sh):
        return None
    ext = (V // sh[0], V // sh[1], V // sh[2])
    if 4 * act_floats(*ext, c0, L, T > 1) + index_bytes(*ext, c0, L) + 16 * P > MEM:
        return None
    halo = 4 * halo_floats(V, V, V, c0, L, sh)
    sb, ns = sums(T, c0, L)
    grad = 2 * (n - 1) / n * 4 * P
    nconv = len(convs(c0, L))
    t_comp = 3 * flops(V, V, V, c0, L) / T / RATE
    t_halo = halo / BW + 3 * nconv * 2 * sum(x > 1 for x in sh) * LAT
    t_sums = ns * 2 * math.log2(T) * LAT if T > 1 else 0  # latency-bound
    t_grad = grad / BW + 2 * math.log2(n) * LAT
    # The gradient all-reduce overlaps the backward pass (2/3 of the compute) at best.
    t_step = t_comp + t_halo + t_sums + max(0.0, t_grad - 2 / 3 * t_comp)
    return math.ceil(N_TRAIN / R) * t_step, halo, sb, grad


def table():
    c0 = 64
    print("Per sample and step, upstream defaults (unet_bottleneck_dim 3, base 64, batch 1):")
    print()
    print("| scale | volume | levels | params | params + grads + Adam | activations | "
          "training FLOPs | halo per rank, [2,1,1] | halo, [4,4,4] interior block | "
          "GroupNorm + loss sums | gradient all-reduce per rank |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for s in range(7, 12):
        V, L = 1 << s, s - 3
        P = params(c0, L)
        print(f"| {s} | {V}^3 | {L} | {P / 1e6:.1f} M | {fmt_bytes(16 * P)} | "
              f"{fmt_bytes(4 * act_floats(V, V, V, c0, L) + index_bytes(V, V, V, c0, L))} | "
              f"{3 * flops(V, V, V, c0, L) / 1e12:.3g} T | "
              f"{fmt_bytes(4 * halo_floats(V, V, V, c0, L, (2, 1, 1)))} | "
              f"{fmt_bytes(4 * halo_floats(V, V, V, c0, L, (4, 4, 4)))} | "
              f"{fmt_bytes(sums(2, c0, L)[0])} in {sums(2, c0, L)[1]} all-reduces | "
              f"{fmt_bytes(8 * P)} |")
    for title, depth in (("upstream defaults (levels = scale - 3)", None),
                         ("a fixed depth of 4 levels (unet_bottleneck_dim = scale - 4; "
                          "90.3 M parameters at every scale)", 4)):
        print()
        print(f"Epoch time by layout, {title}, on the assumed machine "
              f"({RATE / 1e12:.0f} TFLOP/s, {BW / 1e9:.0f} GB/s, {LAT * 1e6:.0f} us per message, "
              f"{fmt_bytes(MEM)} per rank; {N_TRAIN} training samples; the gradient all-reduce "
              f"hidden behind the backward pass where it fits). Bytes are per rank and step:")
        print()
        print("| scale | ranks | data parallel (T = 1): epoch | gradient | "
              "best spatial layout (replicas x shards) | its epoch | halo | GroupNorm + loss "
              "sums | gradient | winner |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for s in range(7, 12):
            V = 1 << s
            L = s - 3 if depth is None else depth
            for n in (8, 64, 512, 4096):
                dp = step_model(V, c0, L, n, (1, 1, 1))
                best = None
                for sh in layouts(n)[1:]:
                    m = step_model(V, c0, L, n, sh)
                    if m and (best is None or m[0] < best[1][0]):
                        best = (sh, m)
                why = "too few samples" if n > N_TRAIN else "does not fit"
                row = f"| {s} | {n} | " + (f"{fmt_s(dp[0])} | {fmt_bytes(dp[3])} | " if dp
                                           else f"{why} | | ")
                if best:
                    sh, (e, h, sb, g) = best
                    T = sh[0] * sh[1] * sh[2]
                    win = "data" if dp and dp[0] <= e else "spatial"
                    row += (f"{n // T} x {sh[0]}x{sh[1]}x{sh[2]} | {fmt_s(e)} | {fmt_bytes(h)} | "
                            f"{fmt_bytes(sb)} | {fmt_bytes(g)} | {win} |")
                else:
                    row += f"none fits | | | | | {'data' if dp else '-'} |"
                print(row)


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "table":
        table()
    elif len(sys.argv) == 10 and sys.argv[1] == "point":
        point(sys.argv[2:])
    else:
        sys.exit(__doc__)
