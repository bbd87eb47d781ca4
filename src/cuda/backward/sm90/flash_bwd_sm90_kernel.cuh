// FlashAttention backward for Hopper (sm_90a): TMA + mbarrier ring + wgmma + warp specialisation
// (FA3 paper App. B.1 Algorithm 3; docs/hopper.md §2.2).
//
// One CTA per (block of BN = 128 keys, batch, kv head). K_j and V_j are loaded once; dK_j and dV_j
// accumulate in registers over every query block i of every query head of the GQA group:
//   warpgroup 0, the producer: one thread streams Q_i and dO_i (TMA, 128B swizzle) through a
//     STAGES-deep ring. The per-row LSE·log2(e) and D = rowsum(dO ∘ O) are copied to shared memory
//     by each consumer warpgroup itself while its first products run (ordinary loads and stores,
//     ordered by the warpgroup's named barriers).
//   warpgroups 1 and 2, the consumers: 64 keys each. With the keys as the M side of every product,
//     the scores come out transposed and P^T, dS^T sit in registers already as A fragments:
//       S^T  = K_w Q_i^T     (SS)         P^T  = exp2(S^T · scale·log2 e − LSE·log2 e)  [masked: 0]
//       dP^T = V_w dO_i^T    (SS)         dS^T = P^T ∘ (dP^T − D)
//       dV_w += P^T dO_i     (RS, dO N-major)
//       dK_w += dS^T Q_i     (RS, Q N-major; × scale at the end)
//     dS^T also goes to shared memory (double-buffered, MN-major 128B-swizzled panels of 64 queries)
//     and, once both consumers wrote theirs, each computes one 64 x 64 chunk of
//       dQ_i += dS K_j       (SS, both operands MN-major)
//     which it stages in shared memory (fragment order: each thread's registers are contiguous, so
//     the stores are free of bank conflicts; the convert kernel knows the order).
//   warp 1 of warpgroup 0, the dQ writer: per step and consumer, waits for the staged chunk (named
//     barrier kDqFull + w), adds it into the global fp32 accumulator with one bulk reduce-add, and
//     gives the staging buffer back (kDqEmpty + w) once the copy engine has read it. The consumers
//     never wait for the add itself (v9; v8 issued it from a consumer thread). The QDESC kernels
//     (deterministic only) have two writers, warps 1 and 2, taking alternate steps
//     (bwd_dq_writer_pair: a step's adds go out while the previous step's completion is awaited).
//     Both writers' steps are dq_writer_step (barrier waits, semaphore polls, adds, hand-backs).
//     With the early convert (dq_done, branch convq) the non-deterministic writers also count, per
//     (batch, query head, query block), the chunks whose adds completed (bwd_dq_writer); convert
//     converts a block once its count is full (deterministic: once its semaphores are).
//     Why staging and a writer rather than adds from the consumers' registers (red.global.add.v4.f32
//     in the same order, as the d192/d256 configurations do), although staging costs 64 KB of the
//     ~368 KB of shared-memory traffic per d128 step, a proxy fence and two barriers: measured
//     (branch dqred, 2026-12-02, bench/NOTES.md) the register adds were 2-6 % slower at d64 and
//     2-3 % at d128 causal, on the same tensors with the early convert off on both; a third dS^T
//     buffer for DQLAG on top of them (no kDsEmpty handshake) 2-11 % slower still. Both deleted.
//   Overlap inside a consumer: P is computed while dP^T is in flight, and the dQ chunk is staged
//   while dK's product runs (issue order S^T, dP^T, dV, dQ, dK).
//   dS^T goes to shared memory with one stmatrix.x4 per 16-query k-step (Cfg::DS_STMATRIX; branch
//   dsstm, 2026-12-02, bench/NOTES.md): the k-step's A fragment is four 8 x 8 b16 matrices in
//   stmatrix's thread layout, so 4 instructions per thread and step at d128 (8 at d64) where the
//   st.shared.b32 loop issued 16 (32), the same bytes, conflict-free either way. Measured 1.8-3.9 %
//   faster at d64/d128 (B4 bf16, T 2048..16384, one process). d32 and the d64 QDESC kernel keep the
//   b32 loop (ptxas spilled 4-20 B with stmatrix there), and so do d192/d256 (P^T beside it).
// dQ one step late (Cfg::DQLAG; branch dqlag, 2026-12-01, bench/NOTES.md sm90 backward v17; the d128
// kernels of both dtypes, flash_bwd_sm90_d128.cu: bf16 1.5-2.4 % faster than the plain schedule at
// T >= 8192, level below; fp16 since 2026-12-02; at d64 it measured 4-7 % slower, so d64 keeps the
// plain schedule). Above, a consumer's dQ chunk of
// step i needs both halves of dS^T_i, so both consumers meet at kDsBarrier every step and run in
// lockstep: their softmax phases coincide, and whichever is late stalls the other. With DQLAG
// consumer w issues step i's dQ product during step i + 1 (between dV_{i+1} and dK_{i+1}, where the
// plain schedule has dQ_i: the same registers live), reading dS^T buffer i mod 2, whose partner half
// was written a whole step earlier. The barrier becomes two one-way handshakes per buffer b, named
// barriers of 256 (128 arrive, 128 sync):
//   kDsFull + 2w + b: w has written its half of buffer b (arrive after the stores and the proxy
//     fence); the partner syncs before its dQ product of that step.
//   kDsEmpty + 2w + b: w's dQ product of buffer b completed (arrive after the wgmma wait); the
//     partner syncs before it overwrites its half of b two steps later (beside the chunk barrier:
//     just before the stores it made ptxas spill at d64).
// A named barrier counts arrivals without phases, so no consumer may arrive twice on one before the
// partner synced the first: w's next arrival on kDsFull + 2w + b (step i + 2) comes after its sync on
// the partner's kDsEmpty of b, which the partner arrives after its own kDsFull sync of step i; the
// same argument the other way round for kDsEmpty. Every step syncs both unconditionally (a barrier or
// a product under a branch between the products made ptxas serialize them and spill, C7512), so the
// arrivals of step -1 (kDsFull of buffer 1, kDsEmpty of buffer 0) are made before the loop, step 0's
// dQ product reads the K tile (read-only: no race) and is dropped, and after the loop each consumer
// issues the last step's chunk and syncs the partner's last kDsEmpty arrival. The dQ writer is then
// one warp per consumer (warps 1 and 2 of warpgroup 0: one warp taking both chunks of a step in
// order would couple the consumers again through the staging buffers). The consumers can now run up
// to about a step apart (the Q/dO ring of 2 and the handshakes bound it); deadlock-free because
// every wait is for an event of an earlier step of the partner, or of the writer for an earlier
// chunk. (At d64 ptxas spilled 16-40 B with this schedule wherever the handshakes went, 0 only with
// each consumer given its own copy of the code, its index a constant: 113 KB of text against 59 KB.
// That kernel measured 4-7 % slower than the plain one, v17, and is gone. d128: 0 spills, 52 KB
// of text against 48 KB.)
// Tried and not kept (branch sprefetch, 2026-12-02, bench/NOTES.md): each step issuing its S^T and
// dP^T before the wait for the previous step's dK, so that a consumer's tensor queue does not drain at
// the step boundary (0 spills; issued instead at the end of the previous step into carried registers,
// ptxas serialized the products, C7514: it counts wgmma groups only within one loop iteration).
// 0.97-1.02 of this schedule's time at D128 T 2048..16384, both signs, the tensor pipe's share
// unchanged: the partner's products already fill the pipe across one consumer's boundary.
// Padding: rows past seqlen_q arrive as zeros (TMA out-of-bounds fill) with LSE = +inf, so their P
// is 0; keys past seqlen_k and the window's edges are masked only in the blocks that cross them.
// Masks and score transforms (cuda/common/score_mods.cuh; causal is the window (-1, 0), bottom-right
// aligned), all run-time fields of the one configuration per head_dim:
//   window: a CTA walks only the query blocks holding a row that sees one of its keys (m_range,
//     both ends), and masks elements only in a block that is not inside every row's window.
//   softcap, ALiBi (`transforms`): the score is recomputed as the forward made it, in the forward's
//     units, t = tanh.approx(s · scale / cap) (the sm90 forward's tanh, so P matches its LSE) and
//     x = cap · t − slope · |i + shift − j|, P = exp2(x · log2 e − LSE · log2 e); the gradient
//     through the cap multiplies dS by 1 − t² (dK, dQ keep their · scale at the end). Three
//     shapes, each a uniform run-time branch beside the plain path's (branch bwdmods, 2026-12-02,
//     bench/NOTES.md sm90 backward v19):
//       ALiBi alone (Cfg::OVERLAP_ALIBI: d64, d128): nothing multiplies dS, so the plain path's
//         overlap with the bias in P's exponent (P while dP^T's product runs).
//       softcap (Cfg::OVERLAP_CAP: d128): t and P while dP^T's product runs; across the wait only
//         u = 1 − t², two per register as f16x2 (16 registers); then dS = P ∘ (dP − D) ∘ u.
//       otherwise (softcap at d64, where u's 32 registers spilled 116 B; every transform at d32,
//         d96, d192, d256): P and dS in one fused pass after both products completed (no register
//         holds t across the wait); those kernels' cubins are what they were before v19.
//     Measured (B4 bf16, T 4096 and 16384, of the plain rate): ALiBi 0.94-0.98 (d128), 0.93-0.96
//     (d64), where the fused pass gave 0.85-0.87 / 0.75; softcap 30 at d128 0.88-0.92 (fused
//     0.88-0.90; the rest is tanh's MUFU op beside exp2's), at d64 0.82-0.84.
// Order of the CTAs (tile_of): a one-dimensional grid walked in chunks of `chunk_heads` (batch, kv
// head) pairs; inside a chunk, key block by key block, the chunk's heads innermost. Causal, key block
// 0 has the most query blocks, so the hardware's in-order dispatch starts the longest CTAs first and
// ends on short ones (longest-first list scheduling); the chunk bounds how many heads' Q/dO and dQ
// accumulators are live in L2 at once.
// Deterministic mode (dq_sem != nullptr): the adds into one dQ chunk happen in a fixed order. A
// semaphore per (batch, query head, query block, consumer) counts the adds that completed; the dQ
// writer waits for its CTA's rank before its bulk reduce-add and signals once the add completed,
// off the consumers' path (v8 did both in a consumer thread: 0.77x the non-deterministic speed at
// every T). Two orders (the plan picks one per problem, det_walk.hpp):
//   v9's (fp16, varlen, d64 MHA; bf16 d64 without softcap in Cfg::DQPAIR, two writers): key block
//     last_n_block(m) first, down to first_n_block(m) (FA3's order: with the key blocks started
//     together, the last one that sees query block m reaches it first), rank = last_n_block(m) - n.
//     Key blocks go in descending order inside a chunk (tile_of), which is shortest-first for
//     causal: the price of this order at short T and with GQA (each CTA walks the group's heads:
//     long CTAs last). The walk is the non-deterministic one (head by head, query blocks ascending).
//   v10's (Cfg::QDESC, an instantiation of its own used only by deterministic calls: bf16, fixed
//     length, d128 and d64 with GQA): key block first_n_block(m) first, up to
//     last_n_block(m), rank = n - first_n_block(m); key blocks ascending inside a chunk (the
//     longest-first order of the non-deterministic mode) and the walk goes query blocks descending,
//     the group's heads innermost, so that (causal or full, no left window) key block n's walk is a
//     prefix of key block n - 1's: both reach each (head, block) at the same step and n waits only
//     for n - 1's add to complete. With a left window edge the ranges slide up with n, key block n
//     starts on blocks n - 1 never sees (rank 0 there) and reaches the shared ones later than n - 1:
//     no long waits either way. Measured as a run-time branch (a264e1d, reverted): det/non-det
//     0.88-0.91 at D128 and 0.90 with GQA 32/8 against v9's 0.84 / 0.68, but 0.74 at D64 MHA
//     T = 16384 (a chain of completion waits with no slack), and the branch cost the
//     non-deterministic loop 1.5-3 %; as a compile-time flag the non-deterministic instantiations
//     keep v9's code exactly.
//   Why no CTA waits for one dispatched after it (no deadlock, given the hardware's in-order
//   dispatch of blockIdx.x): only CTAs of the same (batch, kv head) add into a query head's dQ, and
//   all of them are in the same chunk of tile_of's order, where key block n of a pair comes
//   after every key block n' > n (v9: the order is descending) or every n' < n (v10: ascending).
//   A CTA of rank r waits for the r adds of the key blocks before it in the add order, i.e. for
//   key blocks last_n_block(m) .. n + 1 (v9) or first_n_block(m) .. n - 1 (v10): all earlier in
//   the grid. So the unfinished CTA with the smallest index waits for nothing unfinished; it is
//   resident (every CTA before it was dispatched, and had it not been dispatched no later CTA
//   could be either, so an SM would be free) and finishes; by induction all do. The ranks are
//   0 .. k - 1 over the k key blocks that add into m (contiguous: first_n_block .. last_n_block,
//   the same visibility test as m_range), so the semaphore reaches each rank. A brute-force model
//   of both orders (tile_of, m_range, the ranks, the walks, an in-order dispatch simulation over
//   random shapes, causal or not, GQA groups 1-8, seqlen_q != seqlen_k, windows) is
//   bench/sm90_bwd_det_order_model.py.
// Variable-length batches (cu_seqlens, [total, heads, head_dim] tensors; the same instantiations,
// run-time fields): a CTA per (sequence, key block of 128, kv head). Without the deterministic mode the
// CTAs take their tiles from a list the device built before the launch (flash_bwd_sm90.cu: the
// forward's list with queries and keys swapped), longest walk first across sequences, so no CTA is
// launched for padding; a slot past the list's count exits. In deterministic mode the fixed-length
// order above runs over (sequence, kv head) pairs with max_seqlen_k's key blocks (a sequence's later
// key blocks first, as the semaphores need), and a CTA past its sequence's keys exits. A tile's TMA
// rows start at its sequence's first key / query token (decode_tile: q0, k0) and every mask, m_range
// and the deterministic order use the sequence's own lengths (sq, sk: causal bottom-right aligned per
// sequence). A box reaching past the sequence reads the next sequence's rows: keys past sk are masked
// as at the end of the keys, and query rows past sq are masked explicitly (P = 0, so dS = 0: they add
// nothing to dV, dK or dQ; fixed length gets the same from the TMA's zero rows and LSE = +inf). dK and
// dV rows past sk are not stored (store_rows). The per-row vectors are laid out over the packed query
// rows (block_row); the dQ accumulator's blocks of sequence b start BM * b rows further (accum_row),
// so that no two sequences' blocks overlap (a block's accumulator is in fragment order).
// The varlen fields and branches are run-time and also compile for the d256 configuration below,
// which never runs them: the plan gives variable-length calls above head_dim 128 to the sm80 family
// (cu_q is null there, so decode_tile, block_row and accum_row take their fixed-length values).
//
// Programmatic dependent launch (branch pdl, 2026-12-01; flash_bwd_sm90.cu, run, and
// cuda/hopper/grid_dependency.cuh). This kernel is launched with programmatic stream serialization
// after the prepare kernel, which executes launch_dependents at its entry, so this grid's CTAs start
// on the SMs that prepare's last wave leaves, and every CTA of this grid executes launch_dependents
// for the convert kernel, from one idle thread of warpgroup 0 (thread 96: warp 3, idle in every
// configuration; warps 1 and 2 are the DQLAG, QDESC and DQPAIR ones' dQ writers) right after its
// griddepcontrol.wait (branch convq: until then at the kernel's entry), so that once convert runs
// prepare has completed: convert's early path polls counters that prepare zeroed, and the scratch
// may hold an earlier call's counts at the same addresses (the stream-ordered pool reuses them), which
// a poll before the zeroing would take for complete blocks. launch_dependents counts once per CTA, on
// its first execution (PTX ISA, griddepcontrol), so no other thread may execute it. The cost: none in
// any wave but the first (prepare is long complete there), and convert cannot start before the last
// wave anyway. What runs before griddepcontrol.wait reads only the call's
// inputs (Q, K, V, dO, cu_seqlens) and the varlen tile list, all written by work that completed
// before prepare started (prepare is launched normally, and the list kernel before it): thread 0's
// decode_tile, the mbarrier init, the producer's map prefetches and every TMA load (K/V, and Q/dO
// through the ring, which fills its STAGES before the consumers take a step). The wait is where
// prepare's outputs are first touched: a consumer's first load of LSE·log2 e and D (SPLIT_D: also
// before its first add into the zeroed accumulator), the dQ writer's first add or semaphore poll;
// every other thread waits before it exits, so the grid's completion (what the convert kernel's wait
// and all later work in the stream see) implies prepare's. FLASHBOX_SM90_BWD_PDL=0 launches all of
// them normally (the waits and triggers are then no-ops).
//
// Head dimension 256 (Cfg::SPLIT_D; branch sm90-bwd-d256, 2026-12-01). The layout above at D = 256
// would hold dV_w and dK_w, 64 x 256 fp32 each, in 128 + 128 registers per thread: more than the
// 240 a consumer gets. The d256 configuration divides the columns of the accumulators and the
// queries of the scores instead of the keys:
//   BN = 64 keys per CTA, BM = 64 queries per step. Consumer w computes S^T and dP^T for the 64
//   keys and its 32 queries [32 w, 32 w + 32) (SS, N = 32, over all 256 columns), P^T and dS^T
//   from them, and stores both into shared memory (P^T and dS^T tiles, 64 keys x 64 queries,
//   128-B swizzled rows, double-buffered). Once both halves are there (kDsBarrier), consumer w
//   accumulates columns [128 w, 128 w + 128) of dK_j, dV_j for all 64 keys and 64 queries:
//     dV_j[:, w] += P^T dO_i[:, w]   dK_j[:, w] += dS^T Q_i[:, w]   (SS: A K-major from those tiles,
//                                                                  B N-major, Q/dO panels 2w, 2w+1)
//     dQ_i[:, w] += dS K_j[:, w]     (two 64 x 64 SS chunks, 2w and 2w + 1, one after the other)
//   Registers per consumer thread: dV 64 + dK 64 + S^T 16 + dP^T 16 + their packed halves 8 + 8 +
//   one dQ chunk 32 (ptxas: 0 spills).
//   Shared memory: K 32 KB + V 32 KB + Q, dO rings 2 x 2 x 32 KB + dS^T and P^T 2 x 2 x 8 KB =
//   224 KB, + the LSE/D vectors 1 KB, barriers, 1 KB alignment slack: 226 of 227 KB. The dQ
//   staging (2 chunks x 16 KB per consumer) does not fit, so each consumer adds its chunks from
//   registers (red.global.add.v4.f32, in the staging's fragment order: 512 contiguous bytes per
//   warp and instruction, the bytes the bulk reduce-add moved); no dQ writer warp, and no
//   deterministic mode (the plan gives deterministic calls above head_dim 128 to the sm80 family).
//   History: v13 (3c59daa, measured) had both consumers compute the same S^T, dP^T for all 64
//   queries, P^T and dS^T then register A operands, no P^T tile: 7 products' work per step where
//   5 are useful; 329 TFLOP/s at T = 16384, 1.16x cuDNN's time (bench/NOTES.md). This split (FA3's
//   idea of exchanging P and dS between the warpgroups through shared memory, here by queries)
//   does the 5 and costs the P^T tile, one barrier before dV instead of before dQ, and SS reads
//   of P^T/dS^T. Rejected: a column split over two CTAs like the sm80 d256 backward (7/5 products,
//   plus every Q_i, dO_i and K/V tile loaded twice and twice the CTAs).
//   Head dims 200..248 (multiples of 8) run this configuration: the TMA maps' innermost dimension
//   is the call's head_dim, so the loads read zeros past it (S, dP unchanged; dV, dK, dQ there
//   are 0), and the stores of dK/dV (store_rows) and dQ (the convert kernel) stop at head_dim.
//   (Until branch sm90-bwd-d192 it also ran 136..192: a quarter of its columns zeros at 192, 0.99-1.10
//   of cuDNN's time there against 0.96-1.00 at 256, bench/NOTES.md v14.)
//
// Head dimension 192 (Cfg::ONE_GRAD, with SPLIT_D; branch sm90-bwd-d192, 2026-12-01; head dims
// 136..192 the same way as 200..248 above). The 256 layout with D = 192, rows of three 64-column
// panels (PANELS = 3, as in the forward's d192 kernel: each k-step of S^T / dP^T is 32 B inside a
// panel, four per panel, twelve in all). What changes is who owns which accumulator:
//   consumer 0 accumulates all of dV_j (64 keys x 192 columns), consumer 1 all of dK_j: the same
//   product shape, A the P^T or dS^T tile (K-major) and B dO_i or Q_i (N-major, the three panels
//   LBO apart), one m64n192k16 SS instruction per k-step (wgmma_ss_tb_n192, bulk_ops.cuh). Scores
//   stay split by queries (32 each, N = 32) and P^T, dS^T go through shared memory as at 256.
//   dQ_i (64 x 192) is three 64 x 64 chunks: chunk 0 for consumer 0, chunks 1 and 2 for consumer 1,
//   each added from registers as at 256.
//   Why not each consumer 96 of the 192 columns of both dK and dV (the 256 split, halved): consumer
//   1's columns 96..191 start in the middle of the second panel, and an N-major B operand of 96
//   columns from there is no layout a wgmma descriptor names (N runs 64 columns contiguously per
//   128-B swizzle atom, then LBO to the next panel; starting 64 B into a row, columns 128.. of the
//   same descriptor land in the next row). It would take an N = 32 product starting 64 B into a row
//   plus an N = 64 one, outside the canonical layouts, untestable here. Owning one gradient costs the
//   same registers (96 accumulator floats per thread) with whole panels only.
//   Work per step (64 keys x 64 queries): 5 products of 2 * 64 * 64 * 192 = 1.57 MFLOP (7.9 MFLOP,
//   3/4 of 256's 10.5). Per consumer, in those units: S^T, dP^T halves 0.5 + 0.5, its gradient 1, dQ
//   1/3 (consumer 0) or 2/3 (consumer 1): 2.33 and 2.67. The one barrier per step bounds how far the
//   lighter consumer runs ahead: it computes the next step's S^T / dP^T while the other finishes its
//   second dQ chunk, which keeps the tensor pipe fed when the pipe is the limit.
//   Registers per consumer thread: the gradient 96 + S^T 16 + dP^T 16 + their packed halves 8 + 8 +
//   one dQ chunk 32 = 176 (256: 208). ptxas: 168 (the launch bound; setmaxnreg gives 240), 0 spills.
//   Shared memory: K 24 KB + V 24 KB + Q, dO rings 3 x 2 x 24 KB + dS^T and P^T 2 x 2 x 8 KB =
//   224 KB, + the LSE/D vectors 1 KB, 7 barriers, the tile 48 B, 1 KB alignment slack: 231,528 of
//   232,448 B. The rows being 3/4 of 256's pay for a third ring stage (STAGES = 3: a Q/dO load may
//   take two steps to land). The same 48 KB would instead hold the dQ staging of all three chunks
//   (3 x 16 KB) for a dQ writer warp's bulk reduce-adds (the d128 way); not both. The ring was
//   chosen because the register adds already hold up at 256 (level with cuDNN; 48 KB of adds per
//   step here, the same bytes per FLOP as there), and the writer would need per-consumer chunk
//   counts. 128 keys per CTA does not fit: one gradient of 128 keys is two m64 accumulators, 192
//   floats per thread, with the scores on top more than 240 registers.
//
// Head dimension 96 (branch sm90-d96, 2026-12-01; the same layout as 64 and 128, BM = 64). A 96-column
// row is not a whole number of 128B-swizzle panels, and Q, dO and K are N-major operands too (dK's,
// dV's and dQ's B, whose N runs over the head_dim), which cannot stop inside a 64-column swizzle atom.
// So every tile of this configuration is three 32-column panels of 64-byte rows, 64B swizzle (PCOLS =
// 32, descriptor layout type 2, SBO eight 64-byte rows; K-major k-steps of 16 columns are 32 bytes
// into a row, two per panel); the TMA boxes are 32 columns wide. dV and dK are one N = 96 product per
// k-step. dQ_i is two 64 x 64 chunks as at d128, consumer w computing columns 64 w..: K is four
// panels (KL = 128 columns; the fourth box lies wholly past head_dim, so the TMA fills it with zeros,
// and consumer 1's columns 96..127 come out 0). Both consumers thus issue the same N = 64 product
// (a 64 + 32 split, N = 32 for consumer 1, made ptxas inject warpgroup.arrive around the products,
// C7519, and would leave consumer 0 the longer step). The accumulator rows are DQ_LD = 128 floats
// wide, the d128 layout, so the prepare and convert kernels are d128's (columns 96..127 stay zero
// and are never stored). Tensor work per step: 4 products of 2 · 128 · 64 · 96 and dQ's at 128
// columns (512 column-units where d128 padded does 640: 0.8 of it, ideal 0.75). Registers per consumer
// thread: dV 48 + dK 48 + S^T 32 + dP^T 32 + their packed halves 16 + 16 + dQ 32 (d128: 64 + 64 +
// the same). Head dims 72..88 run it too (zeros past head_dim, stores stop there). Variable-length
// batches run it as they run d64 and d128 (branch paddims: the varlen convert reads accumulator rows of
// DQ_LD floats and writes head_dim columns; before, it read rows of head_dim floats and the plan gave
// varlen 72..96 to sm80).
//
// Head dimension 32 (branch d32bwd, 2026-12-01; the layout of 64, BM = 128 queries per step, BN = 128
// keys). Until then head dims 8..56 ran the d64 kernel on zero columns (branch paddims), so d32 paid
// d64's products. Here every tile is one 32-column panel of 64-byte rows, 64B swizzle, as at 96 (a
// 32-column row is half a 128B swizzle atom, and Q, dO, K are N-major operands too). S^T and dP^T
// are 2 k-steps each (K-major, 32 B apart in the row); dV and dK are m64n32 products from registers
// (wgmma_rs<32>), 16 accumulator floats each per thread. dQ_i stays the d64 layout: two 64 x 64
// chunks, consumer w's the query panel w over K's columns 0..63, of which 32..63 are the TMA's zeros
// (K is two panels, KL = 64, the second box wholly past head_dim), in an accumulator of DQ_LD = 64
// floats (the d64 prepare and convert kernels). A 64 x 32 chunk would save a sixth of the step's
// tensor work but needs a new accumulator layout in both convert kernels (not done). Tensor work per
// step, in units of 2 · 128 · 128 · 32: S^T 1, dP^T 1, dV 1, dK 1, dQ 2 (padded) = 6, where d64
// padded does 10; exp2 of the 128 x 128 scores is the same 16384 per step (MUFU: 1024 clk per SM at
// 16/clk), so the step is bound near max(tensor 6 · 256 = 1536, MUFU 1024) clk, 0.6 of the padded
// step's 2560 (bench/NOTES.md, sm90 backward, "a head_dim 32 backward"). Measured: 0.92-0.95 of the
// padded route's time, 0.85-0.96 of cuDNN's (B4 H16 causal, T 1024..16384): the step is mostly the
// consumers' dependency chain (products, wait, element work, the per-step barrier), which shrinks
// only a little with the products. Why not a larger tile:
// BM = 256 would put S^T and dP^T at 128 floats each per thread (256 > 240 registers); BN = 192 needs
// a third consumer warpgroup (65536 / 512 = 128 registers a thread, less than S^T, dP^T and their
// fragments). The shorter steps get a third Q/dO stage instead (STAGES = 3, 16 KB each). Registers
// per consumer thread: dV 16 + dK 16 + S^T 64 + dP^T 64 + their packed halves 32 + 32 + dQ 32 (d64:
// dV and dK 32 each). Shared memory: K 16 KB + V 8 KB + Q, dO rings 3 x 2 x 8 KB + dS^T 2 x 32 KB +
// dQ staging 32 KB + vectors 2 KB = 170 KB. Head dims 8..24 run it too (zeros past head_dim, the
// stores stop there); 40..56 stay on d64 (bwd_route.hpp).
#pragma once
#include <cuda.h>

#include <climits>
#include <cstdint>

#include "cuda/backward/sm90/bulk_ops.cuh"
#include "cuda/common/score_mods.cuh"
#include "cuda/common/varlen_span.cuh"
#include "cuda/hopper/async_copy.cuh"
#include "cuda/hopper/grid_dependency.cuh"
#include "cuda/hopper/online_softmax.cuh"
#include "cuda/hopper/tma_host.hpp"
#include "cuda/hopper/wgmma.cuh"

namespace flashbox::sm90::bwd {

struct BwdSm90Params {
  CUtensorMap tm_q, tm_k, tm_v, tm_do;
  TmaOrder ord_q, ord_k, ord_v, ord_do;
  void *dk, *dv;
  int64_t dk_stride[3], dv_stride[3];  // batch, seq, head (elements)
  const float *lse_log2;               // [batch * heads_q, seqlen_q_pad]: LSE · log2 e, +inf on padding and empty rows
  const float *dsum;                   // [batch * heads_q, seqlen_q_pad]: rowsum(dO ∘ O), 0 on padding
  float *dq_accum;                     // [batch * heads_q, num_m_blocks, BM * D], fragment order
  int *dq_sem;                         // deterministic mode: [batch * heads_q, num_m_blocks, NWG], zeroed; else null
  int *dq_done;  // early convert, non-deterministic fixed length: [batch * heads_q, num_m_blocks], zeroed; else null
                 // (each complete at NWG per key block adding into the block: one per chunk)
  int seqlen_q, seqlen_k, seqlen_q_pad, heads_q, heads_kv, group, num_m_blocks;
  int head_dim;                           // the call's (<= D): dK/dV columns past it are not stored
  int num_n_blocks, num_bh, chunk_heads;  // the CTA order (tile_of); num_bh = batch * heads_kv
  cuda::DeviceMods mods;                  // window (causal folded in as window_right = 0), softcap, ALiBi
  int transforms;                         // softcap or ALiBi: the fused P/dS path
  float cap_pre;                          // softcap: scale / cap (t = tanh(s · cap_pre)), else 0
  float unit_log2;  // log2 e times one unit of the transformed score: cap with softcap, else scale
  float scale, scale_log2;
  // Variable-length batches (null cu_q: fixed length; the file header). The tensors are [total, heads,
  // head_dim] (the maps' batch dimension has size 1); lse_log2 / dsum are [heads_q, seqlen_q_pad =
  // total_q + batch * BM] by packed token, and sequence b's query block m has its dQ accumulator at
  // row q0 + b * BM + m * BM of the same [heads_q, seqlen_q_pad] rows (accum_row: no overlap).
  // tiles / tile_count: the device-built list ({sequence, n_block * heads_kv + kv head}, longest
  // first), num_tiles its upper bound (the grid); null tiles (deterministic mode): the fixed-length
  // order over (sequence, kv head) with num_n_blocks from max_k, CTAs past a sequence's keys exit.
  const int32_t *cu_q, *cu_k;
  const int2 *tiles;
  const int *tile_count;
  int total_q, total_k, max_q, max_k, num_tiles;
  int sem_rows;  // accumulator rows per semaphore slot: BM (fixed length: one per query block), 1 (varlen)
};

constexpr int kConsumerWarpgroups = 2;

template <class T, int D_, int BM_, bool QDESC_ = false, bool DQLAG_ = false, bool CAPSEL_ = false, bool DQPAIR_ = false>
struct BwdConfig {
  using Elem = T;
  static constexpr int D = D_, BM = BM_, NWG = kConsumerWarpgroups;
  // CAPSEL (d64 softcap, launched only for softcap calls outside v10's order): the general path's mask
  // as -inf scores from mask_scores' pass and one select per score in its loop (bench/NOTES.md sm90
  // backward "the d64 softcap's mask as a select"). In the one d64 kernel it made softcap 12-14 %
  // faster but the plain path 2-3 % and ALiBi 3-7 % slower, so it is an instantiation of its own.
  static constexpr bool CAPSEL = CAPSEL_;
  // QDESC: v10's deterministic order and walk (the file header's "Deterministic mode"); only launched
  // with dq_sem set, fixed length. false: v9's order, the walk of the non-deterministic mode.
  static constexpr bool QDESC = QDESC_;
  // DQPAIR: v9's deterministic order with the QDESC kernels' two dQ writers (bwd_dq_writer_pair), an
  // instantiation of its own (bf16 d64, flash_bwd_sm90_dqpair.cu) only launched with dq_sem set. In the
  // one d64 kernel (branch detpair, fe30de7) the writers' alternating barrier ids cost its
  // non-deterministic calls 2-4 %; here the non-deterministic cubin is the one it was before.
  static constexpr bool DQPAIR = DQPAIR_;
  static constexpr bool TWO_WRITERS = QDESC || DQPAIR;
  // DQLAG: each consumer issues step i's dQ chunk during step i + 1, the two consumers coupled by
  // one-way handshakes instead of one barrier per step (the file header's "dQ one step late").
  static constexpr bool DQLAG = DQLAG_;
  // SPLIT_D (head_dim 192 and 256, the file header's "Head dimension 256" and "Head dimension 192"):
  // BN = 64 keys, each consumer scores 32 queries of them and P^T, dS^T are exchanged in shared
  // memory; else BN = 128, 64 keys each, all queries and all D columns. Who owns which accumulator
  // columns: at 256 consumer w owns COLS = 128 columns of dK and dV; at 192 (ONE_GRAD) consumer 0
  // owns all of dV and consumer 1 all of dK (COLS = 192 of one gradient each).
  static constexpr bool SPLIT_D = D >= 192;
  static constexpr bool ONE_GRAD = D == 192;
  // ALiBi alone (OVERLAP_ALIBI: d64, d128) and softcap (OVERLAP_CAP: d128) keep the plain path's
  // overlap, P^T under dP^T's product (the file header's "Masks and score transforms"); the other
  // head dims, and softcap at d64 (whose u registers spilled 116 B, ptxas C7512), keep the fused pass
  // after both products.
  static constexpr bool OVERLAP_ALIBI = D == 64 || D == 128, OVERLAP_CAP = D == 128;
  // Q/dO ring depth: 3 at 192, where the rows are 3/4 of 256's and the third stage fits (header), and
  // at 32, whose steps are about 0.6 of d64's and whose stages are 16 KB (the file header's "Head
  // dimension 32": a load gets two steps to land).
  static constexpr int STAGES = ONE_GRAD || D == 32 ? 3 : 2;
  // dS^T into shared memory with one stmatrix per 16-query k-step (branch dsstm, 2026-12-02), or with
  // four st.shared.b32 per k-step: at D = 32 and in the d64 QDESC kernel, where ptxas spilled 4-20 B
  // with stmatrix, and with SPLIT_D (P^T stored beside it; not measured).
  static constexpr bool DS_STMATRIX = !SPLIT_D && D != 32 && !(QDESC && D == 64);
  static constexpr int BN = SPLIT_D ? 64 : 128, COLS = SPLIT_D && !ONE_GRAD ? D / NWG : D;
  static constexpr int THREADS = 128 * (NWG + 1);
  // The consumer warpgroups' register count (setmaxnreg.inc): 240, or 208 at D = 32, where ptxas spilled
  // 4-48 B at 240, 232, 224, 216 and 200 (an allocation artefact: its live state is well below 192, at
  // which it spills nothing either) and 0 at 208.
  static constexpr int CONSUMER_REGS = D == 32 ? 208 : 240;
  // Tile rows: 64-column panels of 128-byte rows (128B swizzle), or at D = 96 and 32 (the file header's
  // "Head dimension 96" and "Head dimension 32") 32-column panels of 64-byte rows (64B swizzle, layout
  // type 2); KPP k16 steps per panel.
  static constexpr int PCOLS = D % 64 == 0 ? 64 : 32, PANELS = D / PCOLS, ROW = 2 * PCOLS, KPP = PCOLS / 16;
  static constexpr uint32_t LAYOUT = PCOLS == 64 ? 1 : 2;
  // dQ_i (BM x D) is cut into 64 x 64 chunks: chunk c covers query panel c / ND and head_dim panel
  // c % ND. One chunk per consumer (staged, the dQ writer adds it), or with SPLIT_D the consumer's
  // chunks, added from its registers: two each at 256; at 192 chunk 0 for consumer 0 (which owns dV),
  // chunks 1 and 2 for consumer 1.
  // D = 96: two chunks of 64 columns, the second over K's columns 64..127, of which 96..127 are the
  // TMA's zeros (K is four 32-column panels, KL = 128: the last box wholly past head_dim), in an
  // accumulator of DQ_LD = 128 columns (the d128 layout, so the convert kernels are the d128 ones).
  // D = 32 the same way: one chunk of 64 columns over K's two panels, the second wholly past head_dim
  // (KL = 64), in an accumulator of DQ_LD = 64 columns (the d64 layout and convert kernels).
  static constexpr int NQ = BM / 64, ND = (D + 63) / 64, DQ_LD = 64 * ND, KL = DQ_LD;
  static_assert(ONE_GRAD  ? (NQ == 1 && ND == 3 && NWG == 2)
                : SPLIT_D ? (NQ == 1 && ND == 2 * NWG)
                          : NQ * ND == NWG,
                "dQ chunks per consumer warpgroup");
  // K holds KL columns (D, or 128 at D = 96, 64 at D = 32), V, Q and dO D.
  static constexpr int K_BYTES = BN * KL * 2, KV_BYTES = BN * D * 2, Q_BYTES = BM * D * 2, DS_BYTES = BN * BM * 2;
  static constexpr int QW = SPLIT_D ? BM / NWG : BM;       // queries of S^T, dP^T per consumer
  static constexpr int PT_BYTES = SPLIT_D ? DS_BYTES : 0;  // SPLIT_D: P^T, exchanged like dS^T
  static constexpr int DQ_CHUNK_FLOATS = 64 * 64, DQ_BYTES = SPLIT_D ? 0 : BM * DQ_LD * 4, VEC_BYTES = 2 * BM * 4;
  static constexpr int K_OFF = 0, V_OFF = K_BYTES, Q_OFF = K_BYTES + KV_BYTES, DO_OFF = Q_OFF + STAGES * Q_BYTES;
  static constexpr int DS_OFF = DO_OFF + STAGES * Q_BYTES, PT_OFF = DS_OFF + 2 * DS_BYTES;
  static constexpr int DQ_OFF = PT_OFF + 2 * PT_BYTES;
  static constexpr int VEC_OFF = DQ_OFF + DQ_BYTES, BAR_OFF = VEC_OFF + NWG * VEC_BYTES;
  static constexpr int NUM_BARS = 1 + 2 * STAGES;
  static constexpr int TILE_OFF = BAR_OFF + NUM_BARS * 8;              // the CTA's tile (TileRef), 9 ints
  static constexpr int SMEM_BYTES = TILE_OFF + 48 + 1024;  // + slack to align the base to 1024
  static_assert(D == 32 || D == 64 || D == 96 || D == 128 || D == 192 || D == 256,
                "head_dim 32, 64, 96, 128, 192 or 256");
  static_assert(SMEM_BYTES <= 227 * 1024, "shared memory");
  static_assert(!(QDESC && SPLIT_D), "the d192 and d256 configurations have no deterministic mode");
  static_assert(!(DQLAG && SPLIT_D), "DQLAG is a schedule of the BN = 128 layout");
  static_assert(!(DQLAG && QDESC), "QDESC's odd-step dQ barriers (kDqOdd) are DQLAG's dS^T handshake ids");
  static_assert(!(DQPAIR && (QDESC || DQLAG || SPLIT_D || CAPSEL)), "DQPAIR: v9's order on the plain BN = 128 layout");
};

// Named barriers: 0 is __syncthreads; 1 both consumers (dS^T complete); 2 + w one consumer;
// 4 + w consumer w's dQ chunk staged, 6 + w its staging buffer free (consumer w and the dQ writer).
// QDESC and DQPAIR (two dQ writers, bwd_dq_writer_pair): those of the even steps; the odd steps' are
// kDqOdd (4) further, 8 + w and 10 + w (DQLAG's ids below: those kernels are never DQLAG).
constexpr int kDsBarrier = 1;
constexpr int kChunkBarrier = 2;
constexpr int kDqFull = 4;
constexpr int kDqEmpty = 6;
constexpr int kDqOdd = 4;
constexpr int kDqBarrierThreads = 128 + 32;
// DQLAG (no kDsBarrier): 8 + 2 w + b consumer w's half of dS^T buffer b written (w arrives, the
// partner syncs before its dQ product reads the buffer); 12 + 2 w + b consumer w's dQ product of
// buffer b completed (w arrives, the partner syncs before it overwrites its half of b). 16 in all.
constexpr int kDsFull = 8;
constexpr int kDsEmpty = 12;

// The query blocks [x, y) that hold a row seeing a key of K block n (the window's rows of the
// block's first and last key, clamped to the real rows); empty (x == y) when no row sees any.
// The convert kernel's early path counts a block's adders with the same function (adders_of).
__device__ __forceinline__ int2 m_range(const cuda::DeviceMods &mods, int n_block, int BM, int BN, int sq, int sk) {
  const int shift = sk - sq, k_first = n_block * BN, k_last = min(k_first + BN, sk) - 1;
  const int q_begin = cuda::mods_query_begin(mods, k_first, shift, sq);
  const int q_end = cuda::mods_query_end(mods, k_last, shift, sq);
  if (q_begin >= q_end) return make_int2(0, 0);
  return make_int2(q_begin / BM, (q_end + BM - 1) / BM);
}
__device__ __forceinline__ int2 m_range(const BwdSm90Params &p, int n_block, int BM, int BN, int sq, int sk) {
  return m_range(p.mods, n_block, BM, BN, sq, sk);
}
// The number of key blocks whose CTAs add into query block m (fixed length: every (batch, query
// head) alike), counted by one warp (all 32 lanes call it, the sum in every lane): the key blocks n
// with m in m_range(n), so exactly the steps the main kernel's CTAs run on m (one add per step and
// consumer, one completion signal per step: the early convert's target, flash_bwd_sm90.cu).
__device__ __forceinline__ int adders_of(const cuda::DeviceMods &mods, int m, int BM, int BN, int sq, int sk) {
  const int num_n = (sk + BN - 1) / BN;
  int count = 0;
  for (int n = threadIdx.x % 32; n < num_n; n += 32) {
    const int2 r = m_range(mods, n, BM, BN, sq, sk);
    count += r.x <= m && m < r.y;
  }
  return __reduce_add_sync(0xffffffffu, count);
}

// One CTA's work: key block n_block of kv head hk of batch entry (varlen: sequence) b; tb is the
// maps' batch coordinate (b, or 0 for varlen), q0 / k0 the sequence's first query / key token in the
// packed tensors (0 for fixed length), sq / sk its lengths.
struct BwdTile {
  int n_block, hk, b, tb, q0, k0, sq, sk;
};

// The CTA's tile in shared memory (thread 0 writes it), each field read where it is used by a
// volatile shared load: the fields come from memory (the varlen list, cu_seqlens), so values held in
// registers across the main loop cost registers the consumers do not have (ptxas spilled 116-176 B
// with the fields in registers; the fixed-length kernel had its lengths in the constant bank).
struct TileRef {
  uint32_t addr;
  __device__ __forceinline__ int at(int i) const {
    int v;
    asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v) : "r"(addr + 4 * i));
    return v;
  }
  __device__ __forceinline__ int n_block() const { return at(0); }
  __device__ __forceinline__ int hk() const { return at(1); }
  __device__ __forceinline__ int b() const { return at(2); }
  __device__ __forceinline__ int tb() const { return at(3); }
  __device__ __forceinline__ int q0() const { return at(4); }
  __device__ __forceinline__ int k0() const { return at(5); }
  __device__ __forceinline__ int sq() const { return at(6); }
  __device__ __forceinline__ int sk() const { return at(7); }
  __device__ __forceinline__ int valid() const { return at(8); }
};

// The (key block, batch * heads_kv + kv head) of CTA `linear` (the order in the file header): key
// blocks ascending inside a chunk, descending for v9's deterministic order (not QDESC).
template <class Cfg>
__device__ __forceinline__ int2 tile_of(const BwdSm90Params &p, int linear) {
  const int per_chunk = p.chunk_heads * p.num_n_blocks;
  const int c = linear / per_chunk, r = linear - c * per_chunk;
  const int heads_here = min(p.chunk_heads, p.num_bh - c * p.chunk_heads);
  int n = r / heads_here;
  const int bh = c * p.chunk_heads + (r - n * heads_here);
  if (!Cfg::QDESC && p.dq_sem != nullptr) n = p.num_n_blocks - 1 - n;
  return make_int2(n, bh);
}

// CTA `linear`'s tile; false when it has none (varlen: a list slot past the count, or a key block
// past its sequence's keys in the deterministic grid).
template <class Cfg>
__device__ __forceinline__ bool decode_tile(const BwdSm90Params &p, int linear, BwdTile &t) {
  constexpr int BN = Cfg::BN;
  int n, hk, b;
  if (p.tiles != nullptr) {
    if (linear >= min(*p.tile_count, p.num_tiles)) return false;
    const int2 e = p.tiles[linear];
    n = e.y / p.heads_kv, hk = e.y - n * p.heads_kv, b = e.x;
  } else {
    const int2 tl = tile_of<Cfg>(p, linear);
    n = tl.x, hk = tl.y % p.heads_kv, b = tl.y / p.heads_kv;
  }
  t.n_block = n, t.hk = hk, t.b = b;
  if (p.cu_q == nullptr) {
    t.tb = b, t.q0 = t.k0 = 0, t.sq = p.seqlen_q, t.sk = p.seqlen_k;
    return true;
  }
  const cuda::VarlenSpan s = cuda::varlen_span(p.cu_q, p.cu_k, b, p.total_q, p.total_k, p.max_q, p.max_k);
  t.tb = 0, t.q0 = s.q0, t.k0 = s.k0, t.sq = s.seqlen_q, t.sk = s.seqlen_k;
  return n * BN < t.sk;
}

// The first row of query block m of query head h in the per-row vectors (LSE·log2 e, D): fixed
// length [batch * heads_q, seqlen_q_pad]; varlen [heads_q, seqlen_q_pad] by packed token, from the
// sequence's first token (a block reaching past the sequence reads the next one's values: masked).
__device__ __forceinline__ int64_t block_row(const BwdSm90Params &p, TileRef t, int h, int m, int BM) {
  return (int64_t(t.tb()) * p.heads_q + h) * p.seqlen_q_pad + t.q0() + int64_t(m) * BM;
}
// The same block's first row in the dQ accumulator (times head_dim) and its semaphores. Fixed length:
// block_row. Varlen: block_row + sequence * BM, so that sequence b's blocks start at q0 + b * BM and
// its last, partial block ends before sequence b + 1's first (seqlen_q_pad = total_q + batch * BM).
// They must not overlap: a block's accumulator is in fragment order (every 4096-float chunk mixes
// all 64 of its rows), so the next sequence's adds into an overlapping tail would land on this
// sequence's rows.
__device__ __forceinline__ int64_t accum_row(const BwdSm90Params &p, TileRef t, int h, int m, int BM) {
  return block_row(p, t, h, m, BM) + (p.cu_q != nullptr ? int64_t(t.b()) * BM : 0);
}

// The last key block whose CTA adds into query block m (m inside its m_range), for the order of
// the deterministic adds; only asked for query blocks that this CTA adds to (the result is >= n).
// The CTAs that add into m are the contiguous key blocks up to this one (a row's window is an
// interval sliding with the row, so the keys some row of m sees are one interval), each counted
// once by the semaphore: m_range and this are the same "some real row sees some real key" test.
__device__ __forceinline__ int last_n_block(const BwdSm90Params &p, int m, int BM, int BN, int sq, int sk) {
  const int num_n = (sk + BN - 1) / BN;
  if (p.mods.window_right < 0) return num_n - 1;
  const int r_last = min((m + 1) * BM, sq) - 1;
  const int k_end = cuda::mods_key_end(p.mods, r_last, sk - sq, sk);  // keys < k_end seen
  return min(num_n - 1, (k_end + BN - 1) / BN - 1);
}
// The first key block whose CTA adds into query block m (m inside its m_range), for v10's order
// (QDESC): the keys some row of m sees start at its first row's first key (the window's left end
// rises with the row; a first row that sees nothing has its left end clamped to 0, as the first row
// that does see something, bench/sm90_bwd_det_order_model.py checks it).
__device__ __forceinline__ int first_n_block(const BwdSm90Params &p, int m, int BM, int BN, int sq, int sk) {
  if (p.mods.window_left < 0) return 0;
  return cuda::mods_key_begin(p.mods, m * BM, sk - sq, sk) / BN;
}

__device__ __forceinline__ int ld_acquire_gpu(const int *ptr) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(ptr) : "memory");
  return v;
}
__device__ __forceinline__ void red_release_gpu_add(int *ptr, int v) {
  asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(ptr), "r"(v) : "memory");
}
// Orders the bulk (async proxy) accesses to global memory with this thread's ordinary ones.
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }

template <class Cfg>
__device__ __forceinline__ void bwd_producer(const BwdSm90Params &p, uint8_t *smem, uint64_t *kv_full, uint64_t *full,
                                             uint64_t *empty, TileRef t) {
  const int n_block = t.n_block(), hk = t.hk(), b = t.tb();
  tma_prefetch_map(&p.tm_q);
  tma_prefetch_map(&p.tm_do);
  mbar_expect_tx_arrive(kv_full, Cfg::K_BYTES + Cfg::KV_BYTES);
  load_tile<Cfg::KL / Cfg::PCOLS, Cfg::PCOLS>(smem + Cfg::K_OFF, Cfg::BN * Cfg::ROW, &p.tm_k, p.ord_k, kv_full, t.k0() + n_block * Cfg::BN, hk,
                         b);
  load_tile<Cfg::PANELS, Cfg::PCOLS>(smem + Cfg::V_OFF, Cfg::BN * Cfg::ROW, &p.tm_v, p.ord_v, kv_full, t.k0() + n_block * Cfg::BN, hk,
                         b);
  PipeState<Cfg::STAGES> st;
  const int2 mr = m_range(p, n_block, Cfg::BM, Cfg::BN, t.sq(), t.sk());
  const auto load_step = [&](int h, int m) {
    mbar_wait(empty + st.stage, st.phase ^ 1);
    uint64_t *bar = full + st.stage;
    mbar_expect_tx_arrive(bar, 2 * Cfg::Q_BYTES);
    load_tile<Cfg::PANELS, Cfg::PCOLS>(smem + Cfg::Q_OFF + st.stage * Cfg::Q_BYTES, Cfg::BM * Cfg::ROW, &p.tm_q, p.ord_q, bar,
                           t.q0() + m * Cfg::BM, h, b);
    load_tile<Cfg::PANELS, Cfg::PCOLS>(smem + Cfg::DO_OFF + st.stage * Cfg::Q_BYTES, Cfg::BM * Cfg::ROW, &p.tm_do, p.ord_do, bar,
                           t.q0() + m * Cfg::BM, h, b);
    st.advance();
  };
  if constexpr (Cfg::QDESC) {  // v10's walk: query blocks descending, the group's heads innermost
    for (int m = mr.y - 1; m >= mr.x; --m)
      for (int hi = 0; hi < p.group; ++hi) load_step(hk * p.group + hi, m);
  } else {  // head by head, query blocks ascending
    for (int hi = 0; hi < p.group; ++hi)
      for (int m = mr.x; m < mr.y; ++m) load_step(hk * p.group + hi, m);
  }
}

// One step of a dQ writer, the part both writers share (bwd_dq_writer, bwd_dq_writer_pair; the warp
// converged at entry, lane 0 issues), for consumers W0..W1 - 1: wait for each consumer's staged chunk
// (named barrier full + w); in deterministic mode (det) poll the chunk's semaphore until it holds this
// CTA's rank; add the chunk into the global accumulator with one bulk reduce-add. Once the copy engine
// has read them, give the staging buffers back on empty + w (for the next step: not after the last),
// and in deterministic mode wait for the adds to complete and release the semaphores to the next key
// block. The callers keep what differs (which steps and barrier ids they take, the early convert's
// count) and converge the warp after it. Step and steps are passed rather than "is there a next
// step": compared here, after the __syncwarp, the code is the same as the writers' own loops were
// (branch dqwriter, 2026-12-02: every backward kernel's cubin byte-identical; compared at the call,
// the PTX had the comparison above the warp sync).
template <class Cfg, int W0, int W1>
__device__ __forceinline__ void dq_writer_step(const BwdSm90Params &p, const uint8_t *smem, int lane, int64_t row,
                                               int *sem, int rank, bool det, int full, int empty, int step, int steps) {
#pragma unroll
  for (int w = W0; w < W1; ++w) {
    named_barrier_sync(full + w, kDqBarrierThreads);
    if (lane == 0) {
      if (det) {
        // A legitimate wait is microseconds; a wrong count would hang the device: give up after
        // ~2^24 polls (seconds; the gradients are then wrong and the tests say so).
        for (int polls = 0; ld_acquire_gpu(sem + w) != rank && polls < (1 << 24); ++polls) {}
        fence_proxy_async_global();
      }
      bulk_reduce_add_f32(p.dq_accum + row * Cfg::DQ_LD + w * Cfg::DQ_CHUNK_FLOATS,
                          smem + Cfg::DQ_OFF + w * Cfg::DQ_CHUNK_FLOATS * 4, Cfg::DQ_CHUNK_FLOATS * 4);
    }
    __syncwarp();  // bar.sync is .aligned: the whole warp, converged, at the next one
  }
  if (lane == 0) bulk_wait_read_all();
  __syncwarp();
  if (step + 1 < steps)
#pragma unroll
    for (int w = W0; w < W1; ++w) named_barrier_arrive(empty + w, kDqBarrierThreads);
  if (det && lane == 0) {  // the adds completed: the next key block may add
    bulk_wait_all();
    fence_proxy_async_global();
#pragma unroll
    for (int w = W0; w < W1; ++w) red_release_gpu_add(sem + w, 1);
  }
}

// The dQ writer (one warp; lane 0 issues): the consumers' staged chunks into the global accumulator,
// step by step in the consumers' order (every query block of every query head of the group, head by
// head). W < 0: one warp for both consumers' chunks; W = w (DQLAG): a warp for consumer w's alone, so
// that neither consumer's staging waits for the other's chunk to be read (the consumers run up to a
// step apart there). The QDESC and DQPAIR kernels have two writers taking alternate steps
// (bwd_dq_writer_pair).
template <class Cfg, int W = -1>
__device__ __forceinline__ void bwd_dq_writer(const BwdSm90Params &p, uint8_t *smem, TileRef t) {
  static_assert(!Cfg::TWO_WRITERS, "QDESC, DQPAIR: bwd_dq_writer_pair");
  constexpr int NWG = Cfg::NWG, BM = Cfg::BM, W0 = W < 0 ? 0 : W, W1 = W < 0 ? NWG : W + 1;
  const int lane = threadIdx.x % 32, n_block = t.n_block(), hk = t.hk();
  const int2 mr = m_range(p, n_block, BM, Cfg::BN, t.sq(), t.sk());
  const int m_begin = mr.x, m_end = mr.y;
  const int steps = p.group * (m_end - m_begin);
  const bool det = p.dq_sem != nullptr;
  // The accumulator and the semaphores are prepare's (zeroed there): none of its adds, polls or
  // signals before prepare completed (programmatic launch, the kernel's entry).
  grid_dependency_wait();
  if (steps > 0)
#pragma unroll
    for (int w = W0; w < W1; ++w) named_barrier_arrive(kDqEmpty + w, kDqBarrierThreads);
  const int h_begin = hk * p.group;
  int h = h_begin, m = m_begin;
  for (int step = 0; step < steps; ++step) {
    const int64_t row = accum_row(p, t, h, m, BM);
    int *sem = det ? p.dq_sem + (p.sem_rows == 1 ? row : row / BM) * NWG : nullptr;  // no 64-bit division
    const int rank = det ? last_n_block(p, m, BM, Cfg::BN, t.sq(), t.sk()) - n_block : 0;
    dq_writer_step<Cfg, W0, W1>(p, smem, lane, row, sem, rank, det, kDqFull, kDqEmpty, step, steps);
    // Early convert (p.dq_done, non-deterministic only; flash_bwd_sm90.cu, convert_dq_early_kernel):
    // once this warp's adds of the step completed, a release add of their count (NWG chunks, or with
    // DQLAG 1 per writer warp) to the block's counter, which is complete at NWG per adding key block;
    // as dq_writer_step's deterministic signal (async-proxy writes, completion wait, proxy fence,
    // generic release). The wait comes right after the adds were read, when the consumers have just started
    // the next step: it ends long before they stage that step's chunks (a step is 3-5 us at T1024, a
    // 32 KB reduce-add's completion an estimated ~1 us), so it stays off their path, and no block's
    // count is held back by a step (waiting a step later, for step i - 1's groups, would delay every
    // count by one).
    if (p.dq_done != nullptr && lane == 0) {
      bulk_wait_all();
      fence_proxy_async_global();
      red_release_gpu_add(p.dq_done + int(row / BM), W1 - W0);  // fixed length: (b * heads_q + h) * num_m_blocks + m
    }
    __syncwarp();
    if (++m == m_end) m = m_begin, ++h;
  }
  if (lane == 0) bulk_wait_all();
  __syncwarp();
}

// The QDESC and DQPAIR kernels' dQ writers (v18 and v20, bench/NOTES.md; lane 0 of each issues): warps 1 and 2 of the
// producer warpgroup, writer wi taking the steps s with s % 2 == wi. One writer (bwd_dq_writer) waits
// for each step's adds to complete before it releases their semaphores, and only then goes on to the
// next step: per CTA a serial chain of completion latencies (the bulk add's issue to completion, the
// release, the next CTA's poll), which at D128 is about a step long. With two, step s + 1's adds are
// issued while step s's completion is awaited. The order of the adds into each dQ chunk is unchanged:
// it is the semaphores' (one per (query head, query block, consumer)), and a CTA's walk visits each
// (head, block) once, so the two writers never touch the same semaphore or chunk. What is handed
// between them: consumer w's one staging buffer, step by step: step s's chunk is staged under the
// barriers of s's parity (kDqFull + w, kDqEmpty + w, or kDqOdd further for odd s) and the writer of
// step s, having seen it read, frees the buffer for step s + 1 on step s + 1's parity. A barrier id is
// thus waited on (bar.sync) by one writer only, and one id's instances cannot mix steps: the
// consumer arrives on step s + 2's kDqFull only after the buffer was freed for s + 1, i.e. after
// step s's writer passed its kDqFull (with one id for both writers, the other writer's sync for s + 1
// could complete with three of the consumer's warps for s: bench/sm90_bwd_det_writers_model.py, the
// protocol under random interleavings, finds that). Writer 0 frees step 0's buffers. No new wait
// between CTAs: each add still waits only for the CTAs before it in the add order (the file header).
template <class Cfg>
__device__ __forceinline__ void bwd_dq_writer_pair(const BwdSm90Params &p, uint8_t *smem, TileRef t, int wi) {
  // DQPAIR: v9's order and walk (head by head, query blocks ascending; rank = last_n_block(m) - n),
  // fixed length or varlen; QDESC: v10's, fixed length.
  static_assert(Cfg::TWO_WRITERS && !Cfg::DQLAG, "the QDESC and DQPAIR kernels only (always deterministic)");
  constexpr int NWG = Cfg::NWG, BM = Cfg::BM;
  const int lane = threadIdx.x % 32, n_block = t.n_block(), hk = t.hk();
  const int2 mr = m_range(p, n_block, BM, Cfg::BN, t.sq(), t.sk());
  const int steps = p.group * (mr.y - mr.x);
  // The accumulator and the semaphores are prepare's (zeroed there): none of the adds, polls or
  // signals before prepare completed (programmatic launch, as bwd_dq_writer).
  grid_dependency_wait();
  if (wi == 0 && steps > 0)
#pragma unroll
    for (int w = 0; w < NWG; ++w) named_barrier_arrive(kDqEmpty + w, kDqBarrierThreads);
  const int h_begin = hk * p.group;
  const int full = kDqFull + kDqOdd * wi, empty_next = kDqEmpty + kDqOdd * (1 - wi);
  // v10's walk (query blocks descending, the group's heads innermost) or v9's (DQPAIR), advanced by
  // steps, not divided out: the producer warpgroup has 24 registers.
  int h = h_begin, m = Cfg::QDESC ? mr.y - 1 : mr.x;
  const auto advance = [&]() {
    if constexpr (Cfg::QDESC) {
      if (++h == h_begin + p.group) h = h_begin, --m;
    } else if (++m == mr.y) {
      m = mr.x, ++h;
    }
  };
  if (wi == 1) advance();
  for (int step = wi; step < steps; step += 2, advance(), advance()) {
    const int64_t row = accum_row(p, t, h, m, BM);
    int *sem = p.dq_sem + (p.sem_rows == 1 ? row : row / BM) * NWG;
    const int rank = Cfg::QDESC ? n_block - first_n_block(p, m, BM, Cfg::BN, t.sq(), t.sk())
                                : last_n_block(p, m, BM, Cfg::BN, t.sq(), t.sk()) - n_block;
    // Its completion wait is this writer's alone: the other writer issues the next step's adds meanwhile.
    dq_writer_step<Cfg, 0, NWG>(p, smem, lane, row, sem, rank, true, full, empty_next, step, steps);
    __syncwarp();
  }
}

// Writes a 64 x COLS fp32 accumulator (this warpgroup's 64 keys, columns col0..) as the dtype, keys
// < seqlen_k of the sequence (varlen: the rows past it are the next sequence's), at token k0 + key,
// columns < head_dim (a multiple of 8: whole 8-column groups are in or out).
template <class Cfg>
__device__ __forceinline__ void store_rows(void *out, const int64_t (&stride)[3], int b, int hk, int k0, int key_base,
                                           int seqlen_k, int col0, int head_dim, const float (&acc)[Cfg::COLS / 2],
                                           float mul) {
  using T = typename Cfg::Elem;
  const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32;
  T *base = static_cast<T *>(out) + int64_t(b) * stride[0] + int64_t(hk) * stride[2];
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int key = key_base + warp * 16 + lane / 4 + 8 * half;
    if (key >= seqlen_k) continue;
    T *row = base + int64_t(k0 + key) * stride[1] + col0;
#pragma unroll
    for (int j = 0; j < Cfg::COLS / 8; ++j) {
      if (col0 + 8 * j >= head_dim) continue;
      const int i = 4 * j + 2 * half;
      *reinterpret_cast<uint32_t *>(row + 8 * j + 2 * (lane % 4)) = pack2<T>(acc[i] * mul, acc[i + 1] * mul);
    }
  }
}

template <class Cfg>
__device__ __forceinline__ void bwd_consumer(const BwdSm90Params &p, uint8_t *smem, uint64_t *kv_full, uint64_t *full,
                                             uint64_t *empty, TileRef t_, int wg) {
  using T = typename Cfg::Elem;
  const int n_block = t_.n_block(), hk = t_.hk();
  constexpr int BM = Cfg::BM, BN = Cfg::BN, D = Cfg::D;
  const int t = threadIdx.x % 128, warp = t / 32, lane = t % 32, g = lane / 4, q = lane % 4;
  const uint32_t base = smem_addr(smem);
  // Descriptors (docs/hopper.md §2.5): K-major tiles step 32 B per k16 inside a 128-B row
  // and a panel per 4 steps; N/M-major tiles step 16 rows (2048 B) per k16.
  // This warpgroup's keys (rows of the K/V tiles): its own 64, or with SPLIT_D the block's 64 (its
  // 32 queries of them: q_base) and its columns of dK/dV: all, or at 256 panels 2 wg, 2 wg + 1
  // of the N-major Q/dO operands (at 192, ONE_GRAD: all columns of one gradient).
  constexpr int COLS = Cfg::COLS;
  constexpr bool ONE_GRAD = Cfg::ONE_GRAD, LAG = Cfg::DQLAG;
  const int key_row0 = Cfg::SPLIT_D ? 0 : wg * 64, col0 = Cfg::SPLIT_D && !ONE_GRAD ? wg * COLS : 0;
  // D = 96: every tile in 64-byte rows (ROW), SBO eight of them, layout type 2 (64B swizzle).
  constexpr int ROW = Cfg::ROW, KPP = Cfg::KPP;
  constexpr uint32_t SBO = 8 * ROW, LAYOUT = Cfg::LAYOUT;
  const uint32_t col_off = uint32_t(col0 / 64) * BM * 128;
  const uint64_t k_a = make_smem_desc(base + Cfg::K_OFF + key_row0 * ROW, 16, SBO, LAYOUT);
  const uint64_t v_a = make_smem_desc(base + Cfg::V_OFF + key_row0 * ROW, 16, SBO, LAYOUT);
  // SPLIT_D: this consumer's queries of S^T, dP^T are rows q_base.. of the K-major Q/dO tiles
  // (32 rows = 4096 B, a whole number of 8-row swizzle atoms).
  constexpr int QW = Cfg::QW;
  const int q_base = Cfg::SPLIT_D ? wg * QW : 0;
  const uint64_t q_b0 = make_smem_desc(base + Cfg::Q_OFF + q_base * 128, 16, SBO, LAYOUT);
  const uint64_t do_b0 = make_smem_desc(base + Cfg::DO_OFF + q_base * 128, 16, SBO, LAYOUT);
  // SPLIT_D: P^T and dS^T tiles as K-major A operands (keys x queries, 128-B swizzled rows).
  const uint64_t pt_a = make_smem_desc(base + Cfg::PT_OFF, 16, 1024);
  const uint64_t dst_a = make_smem_desc(base + Cfg::DS_OFF, 16, 1024);
  const uint64_t q_mn0 = make_smem_desc(base + Cfg::Q_OFF + col_off, BM * ROW, SBO, LAYOUT);
  const uint64_t do_mn0 = make_smem_desc(base + Cfg::DO_OFF + col_off, BM * ROW, SBO, LAYOUT);
  // ONE_GRAD: the gradient this consumer accumulates, as A (keys x queries tile) and B (N-major, all
  // 192 columns): dV += P^T dO for consumer 0, dK += dS^T Q for consumer 1 (the same product shape).
  const uint64_t grad_a = wg == 0 ? pt_a : dst_a, grad_b = wg == 0 ? do_mn0 : q_mn0;
  // The (first) dQ chunk of this consumer; at 256: chunks 2 wg and 2 wg + 1 (query panel 0); at 192:
  // chunk 0 (consumer 0), chunks 1 and 2 (consumer 1).
  const int dq_chunk0 = ONE_GRAD ? (wg == 0 ? 0 : 1) : Cfg::SPLIT_D ? 2 * wg : wg;
  const int dq_chunks = ONE_GRAD ? 1 + wg : 2;  // SPLIT_D: chunks added from registers per step
  const int q_panel = dq_chunk0 / Cfg::ND, d_panel = dq_chunk0 % Cfg::ND;
  const uint64_t ds_a0 = make_smem_desc(base + Cfg::DS_OFF + q_panel * BN * 128, BN * 128, 1024);
  // K's columns 64 d_panel..: panel 64 d_panel / PCOLS of its PCOLS-column panels.
  const uint64_t k_mn =
      make_smem_desc(base + Cfg::K_OFF + (64 / Cfg::PCOLS) * d_panel * BN * ROW, BN * ROW, SBO, LAYOUT);

  const int key_base = n_block * BN + key_row0;
  const int key0 = key_base + warp * 16 + g;  // this thread's two keys: key0, key0 + 8

  // ONE_GRAD: dv holds consumer 0's dV or consumer 1's dK (grad_a, grad_b), and dk is unused.
  float dv[COLS / 2], dk[ONE_GRAD ? 1 : COLS / 2];
#pragma unroll
  for (int i = 0; i < COLS / 2; ++i) dv[i] = 0.f;
#pragma unroll
  for (int i = 0; i < int(sizeof dk / sizeof dk[0]); ++i) dk[i] = 0.f;

  mbar_wait(kv_full, 0);
  PipeState<Cfg::STAGES> st;
  int ds_buf = 0;
  // Steps: every query block of m_range of every query head of the group, head by head (QDESC:
  // query blocks descending, the group's heads innermost).
  const int2 mr = m_range(p, n_block, BM, BN, t_.sq(), t_.sk());
  const int m_begin = mr.x, m_end = mr.y;
  const int steps = p.group * (m_end - m_begin);
  // Visibility of (row, key) as d = key - row - shift in [dlo, dhi] (the window; unbounded sides open).
  const int dlo = p.mods.window_left < 0 ? INT_MIN : -p.mods.window_left;
  const int dhi = p.mods.window_right < 0 ? INT_MAX : p.mods.window_right;
  // LSE·log2 e and D of a step, [2][BM] floats, are copied into the warpgroup's shared copy at the
  // start of the step, from registers each thread filled one step ahead (the global latency never
  // waits). The copy's previous reads all happened before the warpgroup's last chunk barrier.
  constexpr int VEC_PER_THREAD = 2 * BM / 128;
  float *vec = reinterpret_cast<float *>(smem + Cfg::VEC_OFF + wg * Cfg::VEC_BYTES);
  const auto load_vec = [&](float(&dst)[VEC_PER_THREAD], int h, int m) {
    const int64_t row = block_row(p, t_, h, m, BM);
#pragma unroll
    for (int j = 0; j < VEC_PER_THREAD; ++j) {
      const int x = t + 128 * j;
      dst[j] = x < BM ? p.lse_log2[row + x] : p.dsum[row + x - BM];
    }
  };
  // The chunk goes to the dQ writer through the staging buffer, once the writer has given it back.
  // odd: QDESC or DQPAIR, an odd step (its barriers are kDqOdd further: two dQ writers, bwd_dq_writer_pair).
  // The stores take the buffer's 32-bit shared-window address (st.shared.v4): through a float4
  // pointer into `smem` ptxas emitted generic ST.E.128 stores, which the proxy fence after them then
  // waited on (5 % of the consumers' stall samples at D128 T8192, bench/results/2026-12-02_sm90_bwd_dsstm).
  const auto stage_dq = [&](const float(&dq)[32], int odd) {
    const uint32_t staging = base + Cfg::DQ_OFF + (wg * Cfg::DQ_CHUNK_FLOATS + t * 4) * 4;
    const int dq_bar = wg + (Cfg::TWO_WRITERS ? kDqOdd * odd : 0);
    named_barrier_sync(kDqEmpty + dq_bar, kDqBarrierThreads);
#pragma unroll
    for (int j = 0; j < 8; ++j)
      asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(staging + j * 128 * 16), "f"(dq[4 * j]),
                   "f"(dq[4 * j + 1]), "f"(dq[4 * j + 2]), "f"(dq[4 * j + 3])
                   : "memory");
    fence_view_async_shared();
    named_barrier_arrive(kDqFull + dq_bar, kDqBarrierThreads);
  };
  float vec_next[VEC_PER_THREAD];
  const int h_begin = hk * p.group;
  int h = h_begin, m = Cfg::QDESC ? m_end - 1 : m_begin;
  // LSE·log2 e and D are prepare's outputs (and with SPLIT_D the adds go into its zeroed accumulator):
  // everything before this (K/V and the first Q/dO stages landing) may overlap prepare's tail.
  grid_dependency_wait();
  if (steps > 0) load_vec(vec_next, h, m);
  if constexpr (LAG) {
    // The handshakes' arrivals of step -1 (kDsFull of buffer 1, kDsEmpty of buffer 0), so that every
    // step syncs unconditionally (a barrier under a branch between the products made ptxas spill).
    if (steps > 0) {
      named_barrier_arrive(kDsFull + 2 * wg + 1, 256);
      named_barrier_arrive(kDsEmpty + 2 * wg, 256);
    }
  }
  for (int step = 0; step < steps; ++step) {
    const uint32_t q_off = st.stage * Cfg::Q_BYTES;
    mbar_wait(full + st.stage, st.phase);
    // S^T = K_w Q^T and dP^T = V_w dO^T, as two groups: P is computed while dP^T is in flight.
    float s[QW / 2], dp[QW / 2];
    const auto score_mma = [&](float(&acc)[QW / 2], uint64_t da, uint64_t db, int k) {
      if constexpr (QW == 32)
        wgmma_ss_n32<T>(acc, da, db, k > 0);
      else
        wgmma_ss<QW, T>(acc, da, db, k > 0);
    };
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < D / 16; ++k)
      score_mma(s, desc_advance(k_a, (k / KPP) * BN * ROW + (k % KPP) * 32),
                desc_advance(q_b0, q_off + (k / KPP) * BM * ROW + (k % KPP) * 32), k);
    wgmma_commit();
#pragma unroll
    for (int k = 0; k < D / 16; ++k)
      score_mma(dp, desc_advance(v_a, (k / KPP) * BN * ROW + (k % KPP) * 32),
                desc_advance(do_b0, q_off + (k / KPP) * BM * ROW + (k % KPP) * 32), k);
    wgmma_commit();
#pragma unroll
    for (int j = 0; j < VEC_PER_THREAD; ++j) vec[t + 128 * j] = vec_next[j];
    int m_next, h_next;
    if constexpr (Cfg::QDESC) {
      h_next = h + 1 == h_begin + p.group ? h_begin : h + 1;
      m_next = h_next == h_begin ? m - 1 : m;
    } else {
      m_next = m + 1 == m_end ? m_begin : m + 1;
      h_next = m_next == m_begin ? h + 1 : h;
    }
    if (step + 1 < steps) load_vec(vec_next, h_next, m_next);
    named_barrier_sync(kChunkBarrier + wg, 128);
    // DQLAG: the partner's dQ product of step - 2 has read dS^T buffer ds_buf (all 128 keys, so this
    // consumer's half too), which this step overwrites below. Here, beside the chunk barrier, rather
    // than just before the stores: there it made ptxas spill at d64.
    if constexpr (LAG) named_barrier_sync(kDsEmpty + 2 * (1 - wg) + ds_buf, 256);

    // P^T: register i holds key key0 + 8 * ((i >> 1) & 1), query q_base + 8 * (i >> 2) + 2q + (i & 1).
    // Masked only where the block is not inside every row's window or crosses the end of the keys or
    // of the rows (fixed length: rows past seqlen_q have P = 0 already, LSE = +inf; varlen: they are
    // the next sequence's rows, with its LSE).
    const int sq = t_.sq(), sk = t_.sk(), shift = sk - sq;
    const bool masked = (n_block + 1) * BN > sk || (m + 1) * BM > sq ||
                        cuda::mods_key_begin(p.mods, m * BM + BM - 1, shift, sk) > n_block * BN ||
                        cuda::mods_key_end(p.mods, m * BM, shift, sk) < (n_block + 1) * BN;
    const auto visible = [&](int i, int odd) {  // register i (+ odd) of this thread: inside the keys, rows, window
      const int key = key0 + 8 * acc_half(i), row = m * BM + q_base + 8 * acc_group(i) + 2 * q + odd;
      const int d = key - row - shift;
      return key < sk && row < sq && d >= dlo && d <= dhi;
    };
    // The plain and ALiBi paths mask the scores (-inf, so exp2 gives 0) in a pass of their own under
    // one branch, before the exponentials. Inside their loop, a per-element `if (masked)` on p was
    // if-converted by ptxas into predicated compares and selects that every step issued, masked or
    // not (37 % of the d64 kernel's instructions in Nsight Compute's source view; bench/NOTES.md sm90
    // backward "the mask out of the loop"). (The softcap paths keep it on p: tanh(-inf) is -1.)
    const auto mask_scores = [&](float(&x)[QW / 2]) {
      if (!masked) return;
#pragma unroll
      for (int i = 0; i < QW / 2; i += 2) {
        if (!visible(i, 0)) x[i] = -INFINITY;
        if (!visible(i, 1)) x[i + 1] = -INFINITY;
      }
    };
    if (!p.transforms) {
      wgmma_wait<1>();
      fence_operands(s);
      // d32 keeps the mask in the loop: with the pass, its 208-register consumers spilled 4-8 B.
      constexpr bool kMaskPass = D != 32;
      if constexpr (kMaskPass) mask_scores(s);
#pragma unroll
      for (int i = 0; i < QW / 2; i += 2) {
        const int col = q_base + 8 * acc_group(i) + 2 * q;
        const float2 lse = *reinterpret_cast<const float2 *>(vec + col);
        float p0 = exp2f(fmaf(s[i], p.scale_log2, -lse.x));
        float p1 = exp2f(fmaf(s[i + 1], p.scale_log2, -lse.y));
        if (!kMaskPass && masked) {
          if (!visible(i, 0)) p0 = 0.f;
          if (!visible(i, 1)) p1 = 0.f;
        }
        s[i] = p0;
        s[i + 1] = p1;
      }
      wgmma_wait<0>();
      fence_operands(dp);
      // dS^T = P^T ∘ (dP^T − D).
#pragma unroll
      for (int i = 0; i < QW / 2; i += 2) {
        const float2 dsum = *reinterpret_cast<const float2 *>(vec + BM + q_base + 8 * acc_group(i) + 2 * q);
        dp[i] = s[i] * (dp[i] - dsum.x);
        dp[i + 1] = s[i + 1] * (dp[i + 1] - dsum.y);
      }
    } else if (Cfg::OVERLAP_ALIBI && !p.mods.capped()) {
      // ALiBi alone (d64, d128) with the plain path's overlap: nothing multiplies dS, so only P's
      // exponent changes, by the bias -slope · |row + shift - key| (two FP ops per score).
      wgmma_wait<1>();
      fence_operands(s);
      const float slope_log2 = cuda::mods_slope(p.mods, t_.b(), h) * kLog2e;
      const float a0 = float(m * BM + q_base + 2 * q + shift - key0);  // row + shift - key of register 0
      mask_scores(s);
#pragma unroll
      for (int i = 0; i < QW / 2; i += 2) {
        const int col = q_base + 8 * acc_group(i) + 2 * q;
        const float2 lse = *reinterpret_cast<const float2 *>(vec + col);
        const float a = a0 + float(8 * acc_group(i) - 8 * acc_half(i));
        s[i] = exp2f(fmaf(s[i], p.scale_log2, fmaf(-slope_log2, fabsf(a), -lse.x)));
        s[i + 1] = exp2f(fmaf(s[i + 1], p.scale_log2, fmaf(-slope_log2, fabsf(a + 1.f), -lse.y)));
      }
      wgmma_wait<0>();
      fence_operands(dp);
#pragma unroll
      for (int i = 0; i < QW / 2; i += 2) {
        const float2 dsum = *reinterpret_cast<const float2 *>(vec + BM + q_base + 8 * acc_group(i) + 2 * q);
        dp[i] = s[i] * (dp[i] - dsum.x);
        dp[i + 1] = s[i + 1] * (dp[i + 1] - dsum.y);
      }
    } else if constexpr (Cfg::OVERLAP_CAP) {
      // Softcap, with or without ALiBi (d128) with the plain path's overlap: t = tanh(s · scale / cap)
      // and P while dP^T's product runs; across the wait only u = 1 - t² more, two per register as
      // f16x2 (u in [0, 1]; f16's 2^-11 is below tanh.approx's own error and dS's bf16 rounding):
      // QW / 4 = 16 registers. Then dS = P ∘ (dP - D) ∘ u.
      wgmma_wait<1>();
      fence_operands(s);
      const float slope_log2 = p.mods.alibi() ? cuda::mods_slope(p.mods, t_.b(), h) * kLog2e : 0.f;
      const float a0 = float(m * BM + q_base + 2 * q + shift - key0);  // row + shift - key of register 0
      uint32_t u[QW / 4];
#pragma unroll
      for (int i = 0; i < QW / 2; i += 2) {
        const int col = q_base + 8 * acc_group(i) + 2 * q;
        const float2 lse = *reinterpret_cast<const float2 *>(vec + col);
        const float a = a0 + float(8 * acc_group(i) - 8 * acc_half(i));
        const float t0 = cuda::tanh_approx(s[i] * p.cap_pre), t1 = cuda::tanh_approx(s[i + 1] * p.cap_pre);
        float p0 = exp2f(fmaf(-slope_log2, fabsf(a), fmaf(t0, p.unit_log2, -lse.x)));
        float p1 = exp2f(fmaf(-slope_log2, fabsf(a + 1.f), fmaf(t1, p.unit_log2, -lse.y)));
        if (masked) {
          if (!visible(i, 0)) p0 = 0.f;
          if (!visible(i, 1)) p1 = 0.f;
        }
        s[i] = p0;
        s[i + 1] = p1;
        u[i / 2] = pack2<__half>(fmaf(-t0, t0, 1.f), fmaf(-t1, t1, 1.f));
      }
      wgmma_wait<0>();
      fence_operands(dp);
#pragma unroll
      for (int i = 0; i < QW / 2; i += 2) {
        const float2 dsum = *reinterpret_cast<const float2 *>(vec + BM + q_base + 8 * acc_group(i) + 2 * q);
        const float2 ug = __half22float2(*reinterpret_cast<const __half2 *>(&u[i / 2]));
        dp[i] = s[i] * (dp[i] - dsum.x) * ug.x;
        dp[i + 1] = s[i + 1] * (dp[i + 1] - dsum.y) * ug.y;
      }
    } else {
      // Softcap and/or ALiBi where the overlap is not built (softcap at d64, both at d32, d96, d192,
      // d256): both products complete, then P^T and dS^T in one pass (file header).
      const float slope_log2 = p.mods.alibi() ? cuda::mods_slope(p.mods, t_.b(), h) * kLog2e : 0.f;
      const bool capped = p.mods.capped();
      // row + shift - key of register 0 (query m * BM + 2q, key key0), as a float for the bias.
      const float a0 = float(m * BM + q_base + 2 * q + shift - key0);
      wgmma_wait<0>();
      fence_operands(s);
      fence_operands(dp);
      // CAPSEL: the mask as -inf scores from mask_scores' pass, and in the loop one float compare and
      // select per score instead of the visibility test's integer compares (if-converted into every
      // step, as in the plain path before its pass). tanh(-inf) = -1 would give p > 0, hence the
      // select; a score is -inf only if masked (finite inputs).
      constexpr bool kSelMask = Cfg::CAPSEL;
      if constexpr (kSelMask) mask_scores(s);
#pragma unroll
      for (int i = 0; i < QW / 2; ++i) {
        const int col = q_base + 8 * acc_group(i) + 2 * q + (i & 1);
        const float lse = vec[col], dsum = vec[BM + col];
        const bool gone = kSelMask && s[i] == -INFINITY;  // (read before s[i] is overwritten)
        float v = s[i], grad = 1.f;
        if (capped) {
          v = cuda::tanh_approx(v * p.cap_pre);
          grad = fmaf(-v, v, 1.f);
        }
        float x = fmaf(v, p.unit_log2, -lse);
        x = fmaf(-slope_log2, fabsf(a0 + float(8 * acc_group(i) + (i & 1) - 8 * acc_half(i))), x);
        float pr = exp2f(x);
        if (kSelMask ? gone : masked && !visible(i & ~1, i & 1)) pr = 0.f;
        s[i] = pr;
        dp[i] = pr * (dp[i] - dsum) * grad;
      }
    }
    uint32_t pa[QW / 4], dsa[QW / 4];
    scores_to_a_fragments<T>(s, pa);
    scores_to_a_fragments<T>(dp, dsa);

    // dS^T (and with SPLIT_D P^T) into shared memory: row = key in the block, 64-query panels of
    // 128-B swizzled rows; SPLIT_D: this consumer's 32 queries of them.
    const uint32_t ds_tile = base + Cfg::DS_OFF + ds_buf * Cfg::DS_BYTES;
    if constexpr (!Cfg::DS_STMATRIX) {
      const uint32_t pt_tile = base + Cfg::PT_OFF + ds_buf * Cfg::PT_BYTES;
#pragma unroll
      for (int i = 0; i < QW / 2; i += 2) {
        const int row = key_row0 + warp * 16 + g + 8 * acc_half(i);
        const int col = q_base + 8 * acc_group(i) + 2 * q;
        const uint32_t off = swizzled_128b(0, BN, row, col) + (col % 8) * 2;
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(ds_tile + off), "r"(dsa[i / 2]) : "memory");
        if constexpr (Cfg::SPLIT_D)
          asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(pt_tile + off), "r"(pa[i / 2]) : "memory");
      }
    } else {
      // One stmatrix per 16-query k-step (branch dsstm, 2026-12-02; the st.shared.b32 loop above did
      // four per k-step, each with its own address): the A fragment of k-step k, dsa[4k + j], is four
      // 8 x 8 b16 matrices in stmatrix's thread layout (lane l: row l / 4, columns 2 (l % 4), + 1);
      // matrix j covers the warp's key rows 8 (j & 1).. and queries 16 k + 8 (j >> 1)..; lanes
      // 8j..8j+7 give the addresses of its rows, each 8-query row segment 16 contiguous bytes of the
      // swizzled layout (as the sm90 forward stores O).
      // Lane l's segment of k-step k is chunk 2 (k % 4) + (l >> 4) of its row in panel k / 4, i.e.
      // (the swizzle being an XOR with row % 8, the tile 1024-B aligned) k-step 0's address XOR
      // 32 (k % 4), plus the panel: one LOP3 per k-step.
      const int mrow = key_row0 + warp * 16 + 8 * ((lane >> 3) & 1) + (lane & 7);
      const uint32_t seg0 = ds_tile + swizzled_128b(0, BN, mrow, 8 * (lane >> 4));
#pragma unroll
      for (int k = 0; k < QW / 16; ++k)
        stmatrix_x4((seg0 ^ ((k % 4) << 5)) + (k / 4) * BN * 128, dsa[4 * k], dsa[4 * k + 1], dsa[4 * k + 2],
                    dsa[4 * k + 3]);
    }
    fence_view_async_shared();
    if constexpr (LAG) named_barrier_arrive(kDsFull + 2 * wg + ds_buf, 256);  // this half of step's dS^T

    if constexpr (Cfg::SPLIT_D) {
      // Both consumers' halves of P^T and dS^T are in shared memory: dV += P^T dO (both operands in
      // shared memory, A K-major, B N-major), then dQ and dK below read them too.
      named_barrier_sync(kDsBarrier, 256);
      if constexpr (!ONE_GRAD) {
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < BM / 16; ++k)
          wgmma_ss_tb_n128<T>(dv, desc_advance(pt_a, ds_buf * Cfg::PT_BYTES + k * 32),
                              desc_advance(do_mn0, q_off + k * 2048), 1);
        wgmma_commit();
      }
    } else {
      // dV += P^T dO (A from registers, B N-major).
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < BM / 16; ++k)
        wgmma_rs<COLS, T>(dv, reinterpret_cast<const uint32_t(&)[4]>(pa[4 * k]),
                          desc_advance(do_mn0, q_off + k * 16 * ROW), 1);
      wgmma_commit();
      // dQ chunk = dS K once both consumers' dS^T is in shared memory, then dK += dS^T Q. DQLAG: the
      // chunk of step - 1 (buffer ds_buf ^ 1), whose other half the partner wrote a step ago.
      if constexpr (LAG) {
        named_barrier_sync(kDsFull + 2 * (1 - wg) + (ds_buf ^ 1), 256);
      } else {
        named_barrier_sync(kDsBarrier, 256);
      }
    }
    float dq[32];
    // DQLAG: no chunk at step 0 (the last one comes after the loop); the product is issued anyway,
    // with A read from the K tile (read-only, so no race) and the result dropped: a wgmma under a
    // branch made ptxas serialize the products and spill (C7512).
    const bool has_dq = !LAG || step > 0;
    wgmma_fence();
    if constexpr (LAG) {
      const uint64_t dq_a = has_dq ? desc_advance(ds_a0, (ds_buf ^ 1) * Cfg::DS_BYTES)
                                   : make_smem_desc(base + Cfg::K_OFF, BN * 128, 1024);
#pragma unroll
      for (int k = 0; k < BN / 16; ++k)
        wgmma_ss_mn_n64<T>(dq, desc_advance(dq_a, k * 2048), desc_advance(k_mn, k * 16 * ROW), k > 0);
    } else {
#pragma unroll
      for (int k = 0; k < BN / 16; ++k)
        wgmma_ss_mn_n64<T>(dq, desc_advance(ds_a0, ds_buf * Cfg::DS_BYTES + k * 2048),
                           desc_advance(k_mn, k * 16 * ROW), k > 0);
    }
    wgmma_commit();
    if constexpr (ONE_GRAD) {
      // This consumer's gradient (dV or dK), all 192 columns, while its first dQ chunk's adds go out.
#pragma unroll
      for (int k = 0; k < BM / 16; ++k)
        wgmma_ss_tb_n192<T>(dv, desc_advance(grad_a, ds_buf * Cfg::DS_BYTES + k * 32),
                            desc_advance(grad_b, q_off + k * 2048), 1);
    } else if constexpr (Cfg::SPLIT_D) {
#pragma unroll
      for (int k = 0; k < BM / 16; ++k)
        wgmma_ss_tb_n128<T>(dk, desc_advance(dst_a, ds_buf * Cfg::DS_BYTES + k * 32),
                            desc_advance(q_mn0, q_off + k * 2048), 1);
    } else {
#pragma unroll
      for (int k = 0; k < BM / 16; ++k)
        wgmma_rs<COLS, T>(dk, reinterpret_cast<const uint32_t(&)[4]>(dsa[4 * k]),
                          desc_advance(q_mn0, q_off + k * 16 * ROW), 1);
    }
    wgmma_commit();
    wgmma_wait<1>();  // dV and dQ done; dK (ONE_GRAD: the gradient) still in flight while the dQ chunk goes out
    fence_operands(dq);
    // DQLAG: this consumer no longer reads buffer ds_buf ^ 1 (step - 1's); the partner overwrites its
    // half at step + 1, if there is one.
    if constexpr (LAG) named_barrier_arrive(kDsEmpty + 2 * wg + (ds_buf ^ 1), 256);

    if constexpr (Cfg::SPLIT_D) {
      // dq_chunks chunks (two; at 192 one or two), each added from registers into the global
      // accumulator in the staging order (float4 j of thread t at (j * 128 + t) * 4: 512 contiguous
      // bytes per warp and j); the second chunk's product runs after the first one's adds were
      // issued. The block's rows are D (the instantiation's 192 or 256) floats wide; fixed length
      // only (accum_row = block_row there).
      float *acc = p.dq_accum + accum_row(p, t_, h, m, BM) * D;
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        if (c >= dq_chunks) break;
        if (c == 1) {
          wgmma_fence();
#pragma unroll
          for (int k = 0; k < BN / 16; ++k)
            wgmma_ss_mn_n64<T>(dq, desc_advance(ds_a0, ds_buf * Cfg::DS_BYTES + k * 2048),
                               desc_advance(k_mn, BN * 128 + k * 2048), k > 0);  // head_dim panel + 1
          wgmma_commit();
          wgmma_wait<0>();
          fence_operands(dq);
        }
        float4 *dst = reinterpret_cast<float4 *>(acc + (dq_chunk0 + c) * Cfg::DQ_CHUNK_FLOATS) + t;
#pragma unroll
        for (int j = 0; j < 8; ++j)
          atomicAdd(dst + j * 128, make_float4(dq[4 * j], dq[4 * j + 1], dq[4 * j + 2], dq[4 * j + 3]));
      }
    } else if (has_dq) {
      stage_dq(dq, step & 1);
    }

    wgmma_wait<0>();
    fence_operands(dv);
    fence_operands(dk);
    fence_operands(pa);
    fence_operands(dsa);
    if (lane == 0) mbar_arrive(empty + st.stage);  // Q_i and dO_i no longer read
    st.advance();
    ds_buf ^= 1;
    h = h_next, m = m_next;
  }
  if constexpr (LAG) {
    // The last step's dQ chunk (buffer ds_buf ^ 1), once the partner's half of it is written.
    if (steps > 0) {
      named_barrier_sync(kDsFull + 2 * (1 - wg) + (ds_buf ^ 1), 256);
      named_barrier_sync(kDsEmpty + 2 * (1 - wg) + ds_buf, 256);  // the partner's last arrival
      float dq[32];
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < BN / 16; ++k)
        wgmma_ss_mn_n64<T>(dq, desc_advance(ds_a0, (ds_buf ^ 1) * Cfg::DS_BYTES + k * 2048),
                           desc_advance(k_mn, k * 16 * ROW), k > 0);
      wgmma_commit();
      wgmma_wait<0>();
      fence_operands(dq);
      stage_dq(dq, 0);  // DQLAG: never two writers
    }
  }
  if constexpr (ONE_GRAD) {
    store_rows<Cfg>(wg == 0 ? p.dv : p.dk, wg == 0 ? p.dv_stride : p.dk_stride, t_.tb(), hk, t_.k0(), key_base,
                    t_.sk(), 0, p.head_dim, dv, wg == 0 ? 1.f : p.scale);
  } else {
    store_rows<Cfg>(p.dv, p.dv_stride, t_.tb(), hk, t_.k0(), key_base, t_.sk(), col0, p.head_dim, dv, 1.f);
    store_rows<Cfg>(p.dk, p.dk_stride, t_.tb(), hk, t_.k0(), key_base, t_.sk(), col0, p.head_dim, dk, p.scale);
  }
}

template <class Cfg>
__global__ void __launch_bounds__(Cfg::THREADS, 1) flash_bwd_sm90_kernel(const __grid_constant__ BwdSm90Params p) {
  extern __shared__ uint8_t smem_raw[];
  // Aligned up to 1024 B (the 128-B swizzle's atom) by an offset from smem_raw rather than by masking
  // its address as an integer: the pointer then stays one into shared memory for the compiler, and
  // the consumers' reads of the LSE / D vectors are LDS, not generic loads (LD, 16 per d128 step).
  uint8_t *smem = smem_raw + ((1024u - (smem_addr(smem_raw) & 1023u)) & 1023u);
  uint64_t *bar = reinterpret_cast<uint64_t *>(smem + Cfg::BAR_OFF);
  uint64_t *kv_full = bar, *full = bar + 1, *empty = bar + 1 + Cfg::STAGES;
  const TileRef tile{smem_addr(smem + Cfg::TILE_OFF)};
  if (threadIdx.x == 0) {
    BwdTile t;
    const bool valid = decode_tile<Cfg>(p, int(blockIdx.x), t);
    int *dst = reinterpret_cast<int *>(smem + Cfg::TILE_OFF);
    dst[0] = t.n_block, dst[1] = t.hk, dst[2] = t.b, dst[3] = t.tb, dst[4] = t.q0, dst[5] = t.k0, dst[6] = t.sq;
    dst[7] = t.sk, dst[8] = valid;
    mbar_init(kv_full, 1);
    for (int s = 0; s < Cfg::STAGES; ++s) {
      mbar_init(full + s, 1);
      mbar_init(empty + s, 4 * Cfg::NWG);  // one arrival per consumer warp
    }
    mbar_init_fence();
  }
  __syncthreads();
  if (!tile.valid()) {  // the whole CTA: no barrier is used yet
    grid_dependency_wait();  // every thread passes it before exiting (see "Programmatic dependent launch")
    return;                  // (the exit counts as this CTA's launch_dependents)
  }
  // Broadcast from lane 0 so that ptxas knows it is warp-uniform: the consumers' shared-memory
  // descriptors derive from it (their key half, dQ chunk, staging buffer), and with a plain
  // threadIdx.x / 128 each was computed in regular registers and moved to uniform ones before every
  // wgmma (R2UR 10 % and IMAD / VIADD 16 % of the d128 kernel's instructions in Nsight Compute).
  const int wg = __shfl_sync(0xffffffffu, int(threadIdx.x) / 128, 0);
  if (wg == 0) {
    setmaxnreg_dec<24>();
    if (threadIdx.x == 0) {
      bwd_producer<Cfg>(p, smem, kv_full, full, empty, tile);
    } else if (threadIdx.x == 96) {  // warp 3: no role in any configuration (the writers are warps 1, 2)
      // The convert kernel (launched programmatically after this one) may be scheduled once every CTA
      // did this: after prepare completed, so that convert, which polls the counters prepare zeroed
      // (early convert) and reads the accumulator, never sees a stale counter of an earlier call in
      // the same scratch bytes (file header, "Programmatic dependent launch"). An idle thread of
      // warpgroup 0 waits, so the producer's prologue loads still overlap prepare's tail. Its CTAs
      // only take SMs that this grid's CTAs (all dispatched by then) left.
      grid_dependency_wait();
      grid_dependents_launch();
    } else if constexpr (Cfg::TWO_WRITERS) {  // two dQ writers taking alternate steps, warps 1 and 2
      if (threadIdx.x / 32 == 1 || threadIdx.x / 32 == 2) bwd_dq_writer_pair<Cfg>(p, smem, tile, threadIdx.x / 32 - 1);
    } else if (Cfg::DQLAG && threadIdx.x / 32 == 1) {
      bwd_dq_writer<Cfg, 0>(p, smem, tile);
    } else if (Cfg::DQLAG && threadIdx.x / 32 == 2) {
      bwd_dq_writer<Cfg, 1>(p, smem, tile);
    } else if (!Cfg::SPLIT_D && threadIdx.x / 32 == 1) {
      bwd_dq_writer<Cfg>(p, smem, tile);
    }
  } else {
    setmaxnreg_inc<Cfg::CONSUMER_REGS>();
    bwd_consumer<Cfg>(p, smem, kv_full, full, empty, tile, wg - 1);
  }
  // The producer thread and the idle threads of warpgroup 0 did not wait: no thread of this grid
  // exits before prepare completed, so this grid's completion implies prepare's (a no-op where the
  // thread waited already).
  grid_dependency_wait();
}

}  // namespace flashbox::sm90::bwd
