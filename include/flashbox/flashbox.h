/* flashbox: attention three ways (naive, online-softmax blocked, tensor-core flash), one contract.
 *
 * Layout: q, k, v, o are [batch, seq, head, head_dim] described by element strides for batch, seq and
 * head; head_dim is contiguous. BTHD, BHTD and slices of either are all valid.
 * Causal masking is bottom-right aligned (query i sees keys j <= i + seqlen_k - seqlen_q, as
 * FlashAttention-2). A query row that sees no key gets O = 0 and LSE = -inf.
 * GQA/MQA: heads_q is a multiple of heads_kv; query head h uses kv head h / (heads_q / heads_kv).
 *
 * Every function returns 0 on success or one of the FLASHBOX_ERR_* codes; the message of this
 * thread's last failure is flashbox_last_error(). Nothing is written to outputs on a failed call. */
#ifndef FLASHBOX_FLASHBOX_H
#define FLASHBOX_FLASHBOX_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define FLASHBOX_API __declspec(dllexport)
#else
#define FLASHBOX_API __attribute__((visibility("default")))
#endif

/* FLASHBOX_FLOAT8_E4M3: OCP FP8 e4m3 ("e4m3fn": no infinities, largest finite 448), one byte per
 * element, for q, k and v of flashbox_attention_forward_ext, with an output dtype and descale
 * factors in flashbox_attention_ext (out_dtype, q/k/v_descale: see there), and for the KV cache of
 * flashbox_attention_kvcache (flashbox_kvcache_args.cache_dtype, k/v_descale). Every other use
 * refuses it with FLASHBOX_ERR_UNSUPPORTED_DTYPE. FP8 e5m2 is not a flashbox_dtype. */
typedef enum {
  FLASHBOX_FLOAT32 = 0,
  FLASHBOX_FLOAT16 = 1,
  FLASHBOX_BFLOAT16 = 2,
  FLASHBOX_FLOAT8_E4M3 = 3
} flashbox_dtype;
typedef enum { FLASHBOX_CPU = 0, FLASHBOX_CUDA = 1 } flashbox_device;
typedef enum { FLASHBOX_AUTO = 0, FLASHBOX_NAIVE = 1, FLASHBOX_BLOCKED = 2, FLASHBOX_FLASH = 3 } flashbox_impl;

/* Error codes: each names one class of failure; the message names the argument and its value. */
enum {
  FLASHBOX_OK = 0,
  FLASHBOX_ERR_NULL_POINTER = 1,   /* a required pointer (args, q, k, v, o, ...) is NULL */
  FLASHBOX_ERR_INVALID_SIZE = 2,   /* batch, seqlen, heads or head_dim <= 0 */
  FLASHBOX_ERR_SIZE_OVERFLOW = 3,  /* an element or byte count overflows int64 */
  FLASHBOX_ERR_HEADS_MISMATCH = 4, /* heads_q not a multiple of heads_kv */
  FLASHBOX_ERR_UNSUPPORTED_HEAD_DIM = 5,
  FLASHBOX_ERR_UNSUPPORTED_DTYPE = 6,
  FLASHBOX_ERR_UNSUPPORTED_IMPL = 7,  /* impl or device value unknown, or not available for it */
  FLASHBOX_ERR_BAD_STRIDE = 8,        /* negative/zero stride, overlapping rows or heads */
  FLASHBOX_ERR_MISALIGNED = 9,        /* pointer or stride not aligned as the kernel needs */
  FLASHBOX_ERR_NO_DEVICE = 10,        /* CUDA requested, but no CUDA build or no GPU */
  FLASHBOX_ERR_OUT_OF_MEMORY = 11,    /* host or device allocation failed */
  FLASHBOX_ERR_CUDA = 12,             /* a CUDA runtime / cuBLAS call failed */
  FLASHBOX_ERR_INVALID_ARGUMENT = 13, /* any other bad value (causal not 0/1, bad softmax_scale, ...) */
  FLASHBOX_ERR_INTERNAL = 14
};

typedef struct {
  flashbox_device device;
  flashbox_dtype dtype;
  flashbox_impl impl;
  int64_t batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
  const void *q, *k, *v;
  void *o;
  float *lse; /* [batch, heads_q, seqlen_q] fp32, natural log; may be NULL */
  int64_t q_stride[3], k_stride[3], v_stride[3], o_stride[3]; /* batch, seq, head (elements) */
  float softmax_scale;                                        /* 0 means 1/sqrt(head_dim) */
  int causal;                                                 /* 0 or 1, bottom-right aligned */
  void *stream;                                               /* cudaStream_t for FLASHBOX_CUDA, else ignored */
} flashbox_attention_args;

FLASHBOX_API int flashbox_attention_forward(const flashbox_attention_args *args); /* 0 on success */
FLASHBOX_API const char *flashbox_last_error(void); /* message of this thread's last failure */
FLASHBOX_API const char *flashbox_version(void);

/* Backward pass. fwd holds the forward's arguments; its o and lse (required) are the forward's outputs
 * and are read, never written. dq/dk/dv have the layouts of q/k/v (strides given separately). */
typedef struct {
  flashbox_attention_args fwd; /* the forward's arguments: q, k, v, o, lse (required) */
  const void *dout;
  int64_t dout_stride[3];
  void *dq, *dk, *dv;
  int64_t dq_stride[3], dk_stride[3], dv_stride[3];
  int deterministic; /* 1: bitwise-reproducible dq/dk/dv across runs */
} flashbox_attention_grad_args;
FLASHBOX_API int flashbox_attention_backward(const flashbox_attention_grad_args *args);
/* Bytes of scratch memory the backward allocates internally for these arguments (fp32 dq accumulator,
 * row sums D = rowsum(dO * O)); negative on invalid arguments. */
FLASHBOX_API int64_t flashbox_attention_backward_workspace_size(const flashbox_attention_grad_args *args);

/* Options: what a caller asks of the CUDA flash kernels beyond the arguments. Every field at its
 * default (flashbox_options_init) is the library's own choice; a NULL options pointer is the same.
 * Tiles, schedules and grid sizes are the library's decision (one tile policy per architecture), not
 * options. The struct grows at its end over versions: a caller sets struct_size = sizeof(flashbox_options)
 * as it was compiled (flashbox_options_init does), the library reads only the fields inside that size
 * and takes the defaults for the rest. */
typedef enum {
  FLASHBOX_FAMILY_AUTO = 0, /* CUDA flash: sm90 on compute capability 9.x when it takes the call, else sm80 */
  FLASHBOX_FAMILY_SM80 = 1, /* the mma.sync kernels (compute capability 8.0+) */
  FLASHBOX_FAMILY_SM90 = 2  /* the Hopper kernels (wgmma, TMA); an error when they cannot take the call */
} flashbox_kernel_family;
typedef struct {
  int32_t struct_size;           /* sizeof(flashbox_options) as the caller compiled it */
  flashbox_kernel_family family; /* CUDA flash forward and backward */
  int32_t sm_margin;             /* SMs left free for other work (FlashAttention-3's sm_margin): a kernel
                                  * whose grid is sized to the device (the sm90 forward's persistent
                                  * grid) launches SMs - sm_margin CTAs; grids of one CTA per tile are
                                  * unchanged. 0 <= sm_margin < the device's SM count; default 0. */
} flashbox_options;
FLASHBOX_API void flashbox_options_init(flashbox_options *options); /* defaults, struct_size set */
FLASHBOX_API int flashbox_attention_forward_opts(const flashbox_attention_args *args, const flashbox_options *options);
FLASHBOX_API int flashbox_attention_backward_opts(const flashbox_attention_grad_args *args,
                                                  const flashbox_options *options);
FLASHBOX_API int64_t flashbox_attention_backward_workspace_size_opts(const flashbox_attention_grad_args *args,
                                                                     const flashbox_options *options);

/* Introspection, for tools and tests. */
FLASHBOX_API int flashbox_cuda_device_count(void);               /* 0 when built without CUDA or no GPU */
FLASHBOX_API const char *flashbox_impl_name(flashbox_impl impl); /* "auto", "naive", "blocked", "flash" */
/* Peak bytes of scratch memory (host for CPU, device for CUDA) the library itself allocated during this
 * thread's last successful forward/backward call: S and P for naive, 0 for flash. Measured by the
 * library's allocation wrapper, not computed from the sizes. */
FLASHBOX_API int64_t flashbox_last_scratch_peak_bytes(void);
/* Name of the kernel that ran in this thread's last successful call, e.g. "cpu_blocked_64x64",
 * "cuda_flash_sm80_d64". */
FLASHBOX_API const char *flashbox_last_kernel(void);

/* ---- Extension 1 (2026-12-01): masks, score transforms and variable-length batches ------------
 * flashbox_attention_forward_ext / _backward_ext take the same arguments as the calls above plus
 * this struct (NULL, or every field at its "off" value, is exactly the plain call). Semantics are
 * FlashAttention-2's; with shift = seqlen_k - seqlen_q of the sequence, query row i sees key j iff
 *   i + shift - window_left <= j <= i + shift + window_right   (-1: unbounded on that side),
 * causal = 1 means window_right = 0 (window_right must then be -1 or 0); the score after the scale
 * is capped, s = softcap * tanh(s / softcap), then biased, s -= slope * |i + shift - j|.
 *
 * Variable length (cu_seqlens_q and cu_seqlens_k both set): args.batch is the number of sequences,
 * cu_seqlens_* are int32 [batch + 1] prefix sums (cu[0] = 0, non-decreasing) in the memory of
 * args.device, and args.seqlen_q / seqlen_k are the total token counts cu_seqlens_*[batch]. q, k, v,
 * o (and dout, dq, dk, dv) are [total, heads, head_dim] tensors: their stride[1] (token) and
 * stride[2] (head) are used, stride[0] is not (any positive value). lse is fp32 [heads_q, total_q].
 * Sequences may have length 0 (a query row with no key: O = 0, LSE = -inf; a key with no query:
 * dK = dV = 0). max_seqlen_q / max_seqlen_k are upper bounds of the lengths (0 without varlen).
 * On device = cpu the prefix sums are checked (0 first, non-decreasing, the total last, lengths
 * within max_seqlen_*). On device = cuda they stay in device memory and are not checked (as in
 * FlashAttention-2: a check would cost a copy and a synchronisation per call); the kernels clamp every
 * start and end to [0, total] and every length to max_seqlen_*, so malformed prefix sums give
 * unspecified values in the rows they name, and rows no sequence covers are left unwritten, but
 * nothing outside q/k/v/o/lse (dq/dk/dv) is ever read or written. alibi_slopes is in the memory of
 * args.device too (on cuda not checked for finiteness).
 *
 * Availability: device = cpu, every impl. device = cuda: what the kernel families take (README,
 * "Feature matrix": the sm80 family takes every field, forward and backward, with head_dim a
 * multiple of 8 up to 256; the sm90 families decline what they lack (e.g. varlen, softcap or ALiBi
 * above head_dim 128; softcap/ALiBi in a non-default forward tile), so auto falls to sm80); a
 * field no family takes is refused with FLASHBOX_ERR_UNSUPPORTED_IMPL and a message naming it,
 * before anything is written. head_dim_v (below): both devices, forward and backward.
 * attention_chunk, seqused_q/k, document ids, prefix lengths and block masks (below): device = cpu
 * (every impl) and device = cuda in the sm80 family (forward and backward, on A100 and H100 alike;
 * on Hopper the sm90 forward takes the bf16 fixed-length calls up to head_dim 128 and the sm90
 * backward bf16 document ids, prefix lengths and block masks at head dims 72..128, fixed length, not
 * deterministic; they and impl = naive decline the rest, so auto runs sm80; block masks with q_block_size
 * and kv_block_size multiples of 128, others refused with FLASHBOX_ERR_UNSUPPORTED_IMPL; not
 * learnable_sink with seqused_q in the backward; seqused_q with head_dim_v != head_dim runs the
 * forward on the CUDA explicit forward, without document ids, prefix lengths, block masks or a mask
 * mod); qv: forward only, device = cpu and device = cuda (the explicit forward, below); fp8 e4m3
 * inputs (out_dtype, descales): device = cpu, forward only. */
/* Block sparsity in FlexAttention's BlockMask layout (torch.nn.attention.flex_attention.BlockMask),
 * for flashbox_attention_ext.block_mask. Queries are cut into blocks of q_block_size rows and keys
 * into blocks of kv_block_size, num_q_blocks = ceil(seqlen_q / q_block_size) and num_kv_blocks =
 * ceil(seqlen_k / kv_block_size) (the last block of each may be shorter); positions are those of the
 * call's sequence (i, j from 0; with seqused_q/k the used rows of each batch entry). Tensors are
 * dense row-major int32 in the memory of args.device:
 *   kv_num_blocks       [batch, heads, num_q_blocks]                  required
 *   kv_indices          [batch, heads, num_q_blocks, max_kv_blocks]   required
 *   full_kv_num_blocks  [batch, heads, num_q_blocks]                  both or neither
 *   full_kv_indices     [batch, heads, num_q_blocks, max_kv_blocks]
 *   q_num_blocks        [batch, heads, num_kv_blocks]                 the transposes: optional,
 *   q_indices           [batch, heads, num_kv_blocks, max_q_blocks]   both or neither; with
 *   full_q_num_blocks   [batch, heads, num_kv_blocks]                 full_kv_* and q_* given,
 *   full_q_indices      [batch, heads, num_kv_blocks, max_q_blocks]   full_q_* are required too
 * batch is 1 or args.batch and heads 1 or args.heads_q (1: the same row for every batch entry or
 * query head, FlexAttention's broadcast; with GQA the mask is per query head). Row (b, h, r) lists
 * kv_num_blocks[b][h][r] "partial" key blocks in its first entries of kv_indices[b][h][r] and
 * full_kv_num_blocks[b][h][r] "full" ones in full_kv_indices; the entries past the count are never
 * read. Query i sees key j iff j's block c = j / kv_block_size
 *   is a full block of row i / q_block_size (every element visible: no other mask applies), or
 *   is a partial block of that row and the extension's element mask admits (i, j) (causal, window,
 *   attention_chunk, document ids, prefix-LM, and mask_mod when set);
 * a block listed in neither is skipped (nothing in it is visible, nothing of it computed). The
 * q_* transposes list, per key block, the query blocks whose rows name it (partial and full apart).
 * Checked on device = cpu before anything is written: struct_size, batch and heads, block sizes
 * >= 1, max_kv_blocks (and max_q_blocks with q_*) >= 1, the required pointers, alignment, no output
 * inside a table; every count within [0, min(max_*_blocks, num_*_blocks)], every listed index within
 * [0, num_*_blocks), no block twice in one row (partial or full), and q_* when given the exact
 * transposes of kv_*. The cpu backward derives the transposes from kv_* (q_* are only checked); the
 * forward never reads them. device = cuda (the sm80 family): q_block_size and kv_block_size must be
 * multiples of 128 (FlexAttention's default 128 x 128 is), else FLASHBOX_ERR_UNSUPPORTED_IMPL; the
 * shapes, pointers and alignment are checked as on the cpu, the values are not (they stay in device
 * memory, as cu_seqlens do): the kernels clamp every count to [0, min(max_kv_blocks, num_kv_blocks)]
 * and skip every index outside [0, num_kv_blocks), so malformed tables give unspecified values in
 * the rows they name (a block listed twice is counted twice) but nothing outside q/k/v/o/lse and the
 * tables is ever read or written. The cuda forward walks kv_* / full_kv_*; the sm80 backward looks
 * each (query block, key block) pair up in kv_* / full_kv_* and does not read q_*; the sm90 backward
 * (bf16, head dims 72..128, not deterministic) walks q_* / full_q_* when given, else lists it builds
 * from kv_* / full_kv_* (so with q_* given they must be kv_*'s transposes, as the cpu checks; a
 * malformed q_* changes values only). Variable-length
 * calls (cu_seqlens) refuse a block mask with FLASHBOX_ERR_UNSUPPORTED_IMPL. */
typedef struct {
  int32_t struct_size; /* sizeof(flashbox_block_mask) */
  int64_t batch, heads;
  int64_t q_block_size, kv_block_size;
  int64_t max_kv_blocks, max_q_blocks; /* the last dims of kv_indices (and full_) / q_indices (and full_) */
  const int32_t *kv_num_blocks, *kv_indices;
  const int32_t *full_kv_num_blocks, *full_kv_indices;
  const int32_t *q_num_blocks, *q_indices;
  const int32_t *full_q_num_blocks, *full_q_indices;
} flashbox_block_mask;

/* ---- Mods: mask_mod and score_mod as CUDA C++, compiled at run time -------------------------------
 * FlexAttention's mask_mod / score_mod written as a CUDA C++ __device__ function, compiled by NVRTC
 * (CUDA's runtime compiler) when flashbox_mod_create is called, so that the cost is paid and the
 * compiler's errors are seen before any attention call. The signature contract, one of
 *   mask:  __device__ bool  NAME(int b, int h, int q_idx, int kv_idx[, const fbx::Aux &aux])
 *   score: __device__ float NAME(float score, int b, int h, int q_idx, int kv_idx[, const fbx::Aux &aux])
 * (b: batch entry, h: query head, q_idx / kv_idx: the positions in the sequence; score: the scaled
 * score, natural units; the mask returns true where the query sees the key). The source may hold
 * helper functions and constants beside NAME; it sees the prelude's names in namespace fbx and
 * nothing of the C++ standard library. Each declared auxiliary tensor is a member of fbx::Aux named as
 * declared: aux.NAME(i0[, i1[, i2[, i3]]]) reads element (i0, ...) (int64_t indices; fp16 and bf16
 * read as float, uint8 as unsigned char); an index outside [0, size) reads as 0, so nothing outside
 * the tensor is ever read; aux.NAME.size(d) is a dimension. The tensors themselves are bound per call
 * (flashbox_attention_ext.mask_mod_aux / score_mod_aux), so one compiled mod serves every batch's
 * data. Compiled for `arch` (0: the current CUDA device's compute capability, or sm_80 and sm_90a
 * both when there is none, or when the library was built without the CUDA runtime; 90 means sm_90a),
 * to CUBIN, as one translation unit: the prelude, the declared tensors, the source (its line numbers
 * are the compiler's, file "mod.cu"), and a probe kernel that calls NAME. The CUBIN is cached on disk
 * under $XDG_CACHE_HOME/flashbox/mods (else $HOME/.cache/flashbox/mods; read once per process), one
 * file per SHA-256 of (flashbox version, NVRTC version, arch, options, the whole translation unit),
 * written atomically; an entry that does not read back whole and matching its hash is compiled
 * again, and a directory that cannot be written leaves the compile in memory (not an error).
 * Errors: FLASHBOX_ERR_INVALID_ARGUMENT with the compiler's log in flashbox_last_error() (a syntax
 * error, an undefined name, a NAME of the wrong signature), nothing cached; FLASHBOX_ERR_UNSUPPORTED_IMPL
 * when the library was built without NVRTC or libnvrtc cannot be loaded (it is loaded on the first
 * create, not at library load). A mask mod runs in the CUDA sm80 family (flashbox_attention_ext.mask_mod);
 * score mods are not taken by any kernel yet. A mask mod's translation unit also holds the kernels
 * that classify its blocks and write its bit tiles (src/jit/mod_source.hpp). */
#define FLASHBOX_MOD_MAX_AUX 8  /* auxiliary tensors per mod */
#define FLASHBOX_AUX_MAX_RANK 4
typedef enum { FLASHBOX_MOD_MASK = 1, FLASHBOX_MOD_SCORE = 2 } flashbox_mod_kind;
/* The element types of auxiliary tensors (ids, lengths, bitmaps and bias tables, not only floats). */
typedef enum {
  FLASHBOX_AUX_INT32 = 0,
  FLASHBOX_AUX_INT64 = 1,
  FLASHBOX_AUX_UINT8 = 2, /* bytes and booleans */
  FLASHBOX_AUX_FLOAT32 = 3,
  FLASHBOX_AUX_FLOAT16 = 4,
  FLASHBOX_AUX_BFLOAT16 = 5
} flashbox_aux_dtype;
/* An auxiliary tensor as the mod's source sees it: its name and type, not its data. */
typedef struct {
  const char *name; /* a C identifier, unique in the mod, not a C++ keyword: aux.name(...) */
  flashbox_aux_dtype dtype;
  int32_t rank; /* 1..FLASHBOX_AUX_MAX_RANK */
} flashbox_aux_decl;
typedef struct {
  int32_t struct_size; /* sizeof(flashbox_mod_desc) */
  flashbox_mod_kind kind;
  const char *source;        /* NUL-terminated CUDA C++, at most 1 MiB */
  const char *function_name; /* NAME above: a C identifier defined by source */
  int32_t num_aux;           /* 0..FLASHBOX_MOD_MAX_AUX */
  const flashbox_aux_decl *aux;
  int32_t arch; /* 0: the device's (see above); else compute capability x 10 that NVRTC supports */
} flashbox_mod_desc;
/* A compiled mod: immutable, usable from any thread, valid until flashbox_mod_destroy. */
typedef struct flashbox_mod_s *flashbox_mod;
/* An auxiliary tensor bound to a call, in the memory of the call's device. */
typedef struct {
  const void *data; /* may be NULL only when a size is 0 */
  flashbox_aux_dtype dtype;
  int32_t rank;
  int64_t sizes[FLASHBOX_AUX_MAX_RANK];   /* the first `rank` are used, each >= 0 */
  int64_t strides[FLASHBOX_AUX_MAX_RANK]; /* elements, >= 0 (0 broadcasts) */
  flashbox_device device;
} flashbox_aux_tensor;
/* What flashbox_mod_create did, for tools and tests. */
typedef struct {
  int32_t struct_size; /* sizeof(flashbox_mod_info) */
  int32_t from_cache;  /* 1: every arch's CUBIN was read from the disk cache; 0: something was compiled */
  int32_t cached;      /* 1: the CUBINs are in the disk cache now (0: the directory was not writable) */
  int32_t num_archs;
  int32_t archs[4];       /* compute capability x 10 of each CUBIN (90: sm_90a) */
  int64_t cubin_bytes[4]; /* each CUBIN's size */
  double seconds;         /* flashbox_mod_create's wall time */
  char key[65];           /* the SHA-256 (hex) of the first arch's cache entry */
} flashbox_mod_info;
FLASHBOX_API int flashbox_mod_create(const flashbox_mod_desc *desc, flashbox_mod *out); /* 0 on success */
FLASHBOX_API void flashbox_mod_destroy(flashbox_mod mod); /* NULL: nothing */
FLASHBOX_API int flashbox_mod_get_info(flashbox_mod mod, flashbox_mod_info *info); /* info->struct_size set */

typedef struct {
  int32_t struct_size;                        /* sizeof(flashbox_attention_ext) as the caller compiled it */
  int32_t window_left, window_right;          /* -1: unbounded (the default is -1, -1, not 0, 0) */
  float softcap;                              /* 0: off; else > 0 and finite */
  const float *alibi_slopes;                  /* NULL: off; fp32 [heads_q], or [batch, heads_q] rows */
  int64_t alibi_batch_stride;                 /* 0: one slope per head for every batch; else >= heads_q */
  const int32_t *cu_seqlens_q, *cu_seqlens_k; /* NULL, NULL: fixed length */
  int64_t max_seqlen_q, max_seqlen_k;
  /* Added after 0.2.0 (a struct_size of the struct without it is still accepted; the field then
   * reads as 0): the head dim of V and O (FlashAttention-3's hdim_v, as DeepSeek's MLA uses). 0 means
   * head_dim. v is then [.., heads_kv, head_dim_v] and o [.., heads_q, head_dim_v]: their strides
   * mean what they mean today, with rows of head_dim_v contiguous elements; q and k keep head_dim.
   * Scores use head_dim (softmax_scale 0 still means 1/sqrt(head_dim)); lse is unchanged. A value
   * other than 0 or head_dim is taken on device = cpu, forward and backward (every impl, head_dim_v
   * up to the cpu's head_dim limit, 576); in the backward dout is [.., heads_q, head_dim_v] like o
   * and dv [.., heads_kv, head_dim_v] like v, while dq and dk keep head_dim. device = cuda takes any
   * head_dim_v >= 1, forward and backward, with every other field the kernels take: the head_dim
   * kernels run on column slices of V and O (at most 256 columns each; Q and K zero-padded when a
   * slice is wider than head_dim, V / O / dO when a slice is narrower than its kernel's head dim; the
   * backward sums the slices' dq, dk and dsink in fp32), with scratch device memory for the padded
   * copies and the outputs (FLASHBOX_ERR_OUT_OF_MEMORY when it does not fit; nothing written on
   * failure; with malformed device cu_seqlens, rows that no sequence covers get unspecified values
   * instead of being left unwritten). A head_dim_v above 256 costs one pass over the keys per 256
   * columns. */
  int64_t head_dim_v;
  /* Added after 0.2.0, after head_dim_v (a struct_size that ends at head_dim_v or before it is still
   * accepted; the fields it lacks read as 0):
   * attention_chunk > 0: chunked local attention (Llama 4; FlashAttention-3's attention_chunk). Query
   * row i sits at key position p = i + shift and sees only the keys of its chunk,
   *   floor(p / attention_chunk) * attention_chunk <= j < that + attention_chunk   (floor division),
   * intersected with causal and the window. 0: off.
   * seqused_q / seqused_k: NULL (off), or int32 [batch] in the memory of args.device: batch entry b
   * uses only the first seqused_q[b] queries and seqused_k[b] keys of its sequence (of seqlen_q /
   * seqlen_k, or with cu_seqlens of its span), and its alignment is shift = seqused_k[b] -
   * seqused_q[b]. Either may be given alone. The forward writes o and lse for the used query rows
   * only (the others keep what they held, as in FlashAttention-3); the backward writes dq, dk and dv
   * rows past the used lengths as 0 (nothing flows through them).
   * Both: device = cpu (forward and backward, every impl; the seqused values are checked:
   * 0 <= seqused <= the length); device = cuda, the sm80 family (forward and backward; the seqused
   * values are device memory and not checked: each is clamped to [0, the length]). */
  int64_t attention_chunk;
  const int32_t *seqused_q, *seqused_k;
  /* Added after 0.2.0, after seqused_k (a shorter struct_size reads them as NULL / 0):
   * qv: NULL (off), or a second query against V (FlashAttention-3's qv, MLA's absorbed decode):
   * [batch, seqlen_q, heads_q, head_dim_v] of args.dtype in args.device's memory (with cu_seqlens
   * [total_q, heads_q, head_dim_v]), strides qv_stride like q's (elements; batch, token, head). The
   * scores become scale * (q_i . k_j + qv_i . v_j), and softmax_scale 0 then means
   * 1 / sqrt(head_dim + head_dim_v). Forward only: the backward refuses it (FlashAttention-3 has no
   * backward with qv). device = cpu, head_dim + head_dim_v up to the cpu's head-dim limit; device =
   * cuda runs every call with qv on the explicit forward (one kernel for any head dims, plain CUDA
   * cores in fp32: correct, not tuned for speed; src/cuda/explicit), whatever impl says: head_dim_v a
   * multiple of 8 up to 512, with windows, causal, attention_chunk, seqused_q/k, softcap, ALiBi,
   * learnable_sink and cu_seqlens; document ids, prefix lengths and block masks with qv are refused
   * there (FLASHBOX_ERR_UNSUPPORTED_IMPL), before anything is written. */
  const void *qv;
  int64_t qv_stride[3];
  /* Added after 0.2.0, after qv_stride (a shorter struct_size reads them as NULL):
   * learnable_sink: NULL (off), or fp32 [heads_q] in args.device's memory, one logit per query head
   * (FlashAttention-4's learnable_sink; gpt-oss's attention sinks) that joins every row's softmax
   * denominator as a column with no value: lse = log(sum_j exp(s_j) + exp(sink)), o = sum_j
   * exp(s_j - lse) v_j (s_j the scaled, transformed scores). A row that sees no key then gets o = 0
   * and lse = sink. dsink: the backward's output for it, fp32 [heads_q], required when learnable_sink
   * is set in a backward call (NULL otherwise): dsink[h] = -sum over batch entries and query rows of
   * exp(sink[h] - lse) * (dout . o), summed in fp64 in a fixed order (deterministic). The forward
   * ignores dsink. Both devices, forward and backward, with every mask, softcap, ALiBi and
   * cu_seqlens: device = cpu checks the values finite; on device = cuda they are device memory and not
   * read on the host, so not checked (as alibi_slopes are not: a non-finite sink gives non-finite
   * outputs). On cuda impl = naive refuses it (auto and flash take it, every kernel family). */
  const float *learnable_sink;
  float *dsink;
  /* Added after 0.2.0, after dsink (a shorter struct_size reads them as 0 / NULL):
   * num_splits: 0 or 1, the keys in one part. n > 1 (forward only): the keys of each sequence are
   * split into n contiguous parts of ceil(seqlen_k / n) keys (the last ones shorter or empty), each
   * part's attention is computed on its own, and o and lse are their combination
   * (flashbox_attention_combine's rule): the same attention up to rounding. out_partial /
   * lse_partial (both or neither): each part's normalised output and LSE are also written there for
   * a caller's own combine, fp32 dense [num_splits, batch, seqlen_q, heads_q, head_dim_v] and
   * [num_splits, batch, heads_q, seqlen_q] (with cu_seqlens: batch 1 and seqlen_q the total, lse
   * [num_splits, heads_q, total_q]); a part that sees no key of a row has LSE -inf there and O 0.
   * device = cpu, at most 256 parts, not with seqused_q/k or learnable_sink; device = cuda refuses
   * num_splits > 1 with FLASHBOX_ERR_UNSUPPORTED_IMPL before anything is written. */
  int64_t num_splits;
  float *out_partial, *lse_partial;
  /* Added after 0.2.0, after lse_partial (a shorter struct_size reads them as NULL): mask families
   * as data (FlexAttention's document and prefix-LM masks), and block sparsity.
   * document_ids_q / document_ids_k: both or neither; int32 [batch, seqlen_q] and [batch, seqlen_k]
   * (dense; with cu_seqlens [total_q] and [total_k], the packed rows): query i sees key j only if
   * document_ids_q[b][i] == document_ids_k[b][j] (any int32 values; packed sequences of any order).
   * prefix_lengths: int32 [batch], 0 <= prefix_lengths[b] <= seqlen_k (with cu_seqlens: the
   * sequence's key count): the keys j < prefix_lengths[b] are visible to every query of batch entry b
   * whatever causal, the window or attention_chunk say (the prefix-LM mask: a bidirectional prefix,
   * the rest causal when causal = 1). Positions are the sequence's own (seqused: its used rows).
   * Together, query i of batch entry b sees key j iff
   *   (j < prefix_lengths[b]  or  j is within causal / window / attention_chunk's bounds above)
   *   and document_ids_q[b][i] == document_ids_k[b][j]
   *   and (with block_mask) j's block is listed for i's block (see flashbox_block_mask: a full block
   *        admits every element, skipping the two lines above; a partial block applies them),
   * and num_splits' key parts still cut the keys. A row that sees no key: o = 0, lse = -inf (the sink
   * with learnable_sink), no gradient.
   * block_mask: NULL (off) or a flashbox_block_mask (above). Fixed-length calls only (with or
   * without seqused_q/k); cu_seqlens refuse it.
   * All four: device = cpu (forward and backward, every impl; values and tables checked); device =
   * cuda, the sm80 family (forward and backward): ids, lengths and tables stay in device memory and
   * are not checked (a prefix length is clamped to [0, the key count]; block tables: see
   * flashbox_block_mask). */
  const int32_t *document_ids_q, *document_ids_k;
  const int32_t *prefix_lengths;
  const flashbox_block_mask *block_mask;
  /* Added after 0.2.0, after block_mask (a shorter struct_size reads them as 0 / NULL): FP8 inputs,
   * FlashAttention-3's fp8 forward interface.
   * args.dtype = FLASHBOX_FLOAT8_E4M3: q, k and v hold e4m3 bytes (their strides in elements =
   * bytes); o is written in out_dtype, which must be FLASHBOX_BFLOAT16 or FLASHBOX_FLOAT16 (the
   * default 0, fp32, is refused: an fp8 call names its output dtype); lse stays fp32.
   * q_descale, k_descale, v_descale: fp32 [batch, heads_kv] in args.device's memory (with
   * cu_seqlens, batch = the sequences), element (b, g) at b * stride[0] + g * stride[1] of
   * *_descale_stride (elements; 0 broadcasts: both 0 is one per-tensor scale); NULL means 1.0 (the
   * strides must then be 0). The attention is computed on the dequantized inputs
   *   q_real[b, i, h, :] = float(q[b, i, h, :]) * q_descale[b, h / (heads_q / heads_kv)]
   *   k_real[b, j, g, :] = float(k[b, j, g, :]) * k_descale[b, g]        (likewise v with v_descale)
   * (query head h reads the descale of its kv head, as FlashAttention-3), scores
   * softmax_scale * q_real . k_real (softmax_scale 0: 1/sqrt(head_dim)), o = softmax . v_real
   * rounded to out_dtype. Every other field (masks, softcap, ALiBi, sinks, varlen, seqused,
   * head_dim_v, num_splits) applies as for any dtype, except qv (refused with fp8).
   * device = cpu: the inputs are dequantized to fp32 (the product rounded once) and the cpu levels
   * run in fp32. device = cuda: the Hopper fp8 forward (compute capability 9.0; e4m3 tensor cores,
   * P quantized to e4m3 for the P.V product), for fixed-length calls with head_dim = head_dim_v a
   * multiple of 16 up to 256, causal or not, GQA/MQA; any other field (windows, softcap, ALiBi,
   * sinks, varlen, seqused, num_splits, head_dim_v != head_dim), another GPU or impl = naive is
   * refused with FLASHBOX_ERR_UNSUPPORTED_IMPL and the reason, before anything is written. On both
   * devices the descale values are checked finite and >= 0 (0 is allowed: an all-zero tensor's amax
   * scale; a negative or non-finite one is refused; on cuda they are read back first, which waits
   * for the call's stream). The backward
   * refuses fp8 (FlashAttention-3 has no fp8 backward), and so does the plain forward
   * (flashbox_attention_forward: no out_dtype there).
   * Any other dtype: out_dtype must be 0 or args.dtype (o in the call's dtype), the descales NULL
   * and their strides 0. */
  flashbox_dtype out_dtype;
  const float *q_descale, *k_descale, *v_descale;
  int64_t q_descale_stride[2], k_descale_stride[2], v_descale_stride[2]; /* batch, kv head (elements) */
  /* Added after 0.2.0, after v_descale_stride (a shorter struct_size reads them as NULL): a mask mod
   * and a score mod as code (flashbox_mod, below: CUDA C++ compiled with NVRTC by
   * flashbox_mod_create), each with its auxiliary tensors, an array of as many flashbox_aux_tensor as
   * the mod declared (NULL when it declared none), in the order of its declaration. The mod must be
   * of its field's kind (mask_mod: FLASHBOX_MOD_MASK). The handles and tensors are checked (each
   * tensor against its declaration: dtype, rank, sizes >= 0, strides, data not NULL when it holds an
   * element, device = args.device).
   * mask_mod: query i of batch entry b, query head h sees key j only if mask_mod(b, h, i, j) is
   * true, on top of every other mask of the call (positions are the sequence's: with seqused its
   * used rows; h is the query head, also with GQA). With block_mask, FlexAttention's meaning: a full
   * block admits every element (the mod is not evaluated there), a partial block applies the mod and
   * the element rules, an unlisted block nothing. Without block_mask, flashbox builds one from the
   * mod first (FlexAttention's create_block_mask: 128 x 128 blocks, a block where the mod is false
   * for every pair of the sequence is skipped, one where it is true for every pair is full unless the
   * call has causal, a window, attention_chunk, document ids or prefix lengths (then every visited
   * block is partial, so those rules still apply), the rest partial). device = cuda, the sm80 family
   * (forward and backward, A100 and H100; the other families decline it), fixed-length calls only
   * (cu_seqlens refuse it). The mod runs as its own small kernels (compiled with it by
   * flashbox_mod_create, for the device's architecture: a mod created for another architecture is
   * refused with FLASHBOX_ERR_UNSUPPORTED_IMPL) that write one bit per (query, key) of every partial
   * block into scratch device memory, which the precompiled attention kernels read: no attention
   * kernel is compiled at run time. Cost per call: the mod over every partial block's elements (and,
   * without block_mask, over every element, to build the lists), scratch of q_block x kv_block / 8
   * bytes per partial block (FLASHBOX_ERR_OUT_OF_MEMORY when it does not fit, nothing written), and
   * one stream synchronisation (the bit tiles are packed, so their total is read back before they
   * are allocated; not usable under CUDA graph capture). device = cpu refuses a mask_mod with
   * FLASHBOX_ERR_UNSUPPORTED_IMPL (it cannot run device code).
   * score_mod: checked as above, then refused by every backend with FLASHBOX_ERR_UNSUPPORTED_IMPL
   * (no kernel applies a score mod yet; softcap and ALiBi are fields of their own). */
  flashbox_mod mask_mod;
  const flashbox_aux_tensor *mask_mod_aux;
  flashbox_mod score_mod;
  const flashbox_aux_tensor *score_mod_aux;
  /* Added after 0.2.0, after score_mod_aux (a shorter struct_size reads it as 0):
   * mask_mod_broadcast: which arguments the mask mod does not depend on, FLASHBOX_MOD_SAME_BATCH
   * and / or FLASHBOX_MOD_SAME_HEADS (FlexAttention's create_block_mask(B=None, H=None)): the mod is
   * then evaluated once with b = 0 (h = 0) and its blocks and bits serve every batch entry (query
   * head), which divides its cost and scratch by batch (heads_q). The caller vouches for it: a mod
   * that does depend on b or h gives the answer of b = 0 or h = 0 to every one. 0: evaluated per
   * batch entry and query head. Set only with mask_mod; other bits are refused. */
  int32_t mask_mod_broadcast;
} flashbox_attention_ext;
#define FLASHBOX_MOD_SAME_BATCH 1 /* flashbox_attention_ext.mask_mod_broadcast */
#define FLASHBOX_MOD_SAME_HEADS 2

/* A struct with every field off (struct_size set, windows -1, head_dim_v 0). */
FLASHBOX_API flashbox_attention_ext flashbox_attention_ext_default(void);
FLASHBOX_API int flashbox_attention_forward_ext(const flashbox_attention_args *args, const flashbox_attention_ext *ext);
FLASHBOX_API int flashbox_attention_backward_ext(const flashbox_attention_grad_args *args,
                                                 const flashbox_attention_ext *ext);

/* ---- KV-cache attention (decode, FlashAttention's flash_attn_with_kvcache) -------------------------
 * q [batch, seqlen_q, heads_q, head_dim] attends to the first cache_seqlens[b] (+ seqlen_new) rows of
 * batch entry b's cache. The cache is either
 *   contiguous: k_cache/v_cache [cache_entries = batch_size_cache, cache_rows = max_seqlen, heads_kv,
 *               head_dim]; batch entry b uses cache entry cache_batch_idx[b] (or b when NULL), or
 *   paged:      k_cache/v_cache [cache_entries = num_blocks, cache_rows = page_size, heads_kv, head_dim]
 *               with block_table [batch, max_blocks_per_seq] int32: key j of entry b is row j % page_size
 *               of page block_table[b][j / page_size]; page_size a multiple of 16.
 * When k_new/v_new [batch, seqlen_new, heads_kv, head_dim] are given they are first written into the
 * cache in place at rows cache_seqlens[b] .. cache_seqlens[b] + seqlen_new - 1, then attended to.
 * Keys before cache_leftpad[b] (when given) are not attended to. Causal is bottom-right aligned
 * against the total length L_b = cache_seqlens[b] + seqlen_new: query i sees keys j <= L_b - seqlen_q + i.
 * A sliding window (window_left/right >= 0, with has_window = 1) keeps keys with
 * L_b - seqlen_q + i - window_left <= j <= L_b - seqlen_q + i + window_right. softcap > 0 replaces a
 * scaled score s by softcap * tanh(s / softcap); alibi_slopes [heads_q] (fp32) adds
 * -slope * |L_b - seqlen_q + i - j|. lse is [batch, heads_q, seqlen_q] fp32 (natural log).
 * The integer tables (cache_seqlens, block_table, cache_batch_idx, cache_leftpad) live on the call's
 * device. Unless tables_trusted = 1 the library reads them before anything is written (for CUDA: a
 * copy to the host and a stream synchronisation) and refuses bad values: a negative length, a length
 * beyond the cache's capacity, a page or cache index out of range. With tables_trusted = 1 nothing is
 * read on the host (usable under CUDA graph capture); the kernels still never touch memory outside the
 * cache for a bad entry (such keys read as zeros and appends to them are dropped), but the result is
 * undefined. Chunked prefill (seqlen_q x heads_q / heads_kv >= 128 on a contiguous cache without
 * rotary, tables read, a cache in the call's dtype) runs as one flash forward per batch entry on the
 * cache's rows, with the same semantics; flashbox_last_kernel() then ends in " (kvcache prefill)".
 * An fp8 e4m3 cache (cache_dtype, at the end of the struct) always runs on the decode kernels. */
typedef struct {
  int32_t struct_size; /* sizeof(flashbox_kvcache_args): lets the struct grow */
  flashbox_device device;
  flashbox_dtype dtype;
  int64_t batch, seqlen_q, heads_q, heads_kv, head_dim;
  const void *q;
  int64_t q_stride[3];                          /* batch, seq, head (elements) */
  void *k_cache, *v_cache;                      /* written only when k_new/v_new are given */
  int64_t k_cache_stride[3], v_cache_stride[3]; /* entry (batch or page), row, head */
  int64_t cache_entries, cache_rows;            /* dims 0 and 1 of k_cache/v_cache (see above) */
  const int32_t *cache_seqlens;                 /* [batch], required */
  const int32_t *block_table;
  int64_t max_blocks_per_seq, block_table_stride; /* NULL: contiguous */
  const int32_t *cache_batch_idx;                 /* [batch] or NULL; contiguous caches only */
  const int32_t *cache_leftpad;                   /* [batch] or NULL */
  const void *k_new, *v_new;
  int64_t seqlen_new; /* both or neither; seqlen_new 0 when NULL */
  int64_t k_new_stride[3], v_new_stride[3];
  void *o;
  int64_t o_stride[3];
  float *lse;          /* may be NULL */
  float softmax_scale; /* 0 means 1/sqrt(head_dim) */
  int causal;          /* 0 or 1 */
  int has_window;
  int64_t window_left, window_right; /* has_window 0: no window; -1 = unbounded side */
  float softcap;                     /* 0: none */
  const float *alibi_slopes;         /* [heads_q] fp32, or rows of alibi_batch_stride (below), or NULL */
  int num_splits;                    /* 0 = chosen by the library; 1 = no split */
  int tables_trusted;                /* 1: skip the host-side table check */
  /* Rotary embedding of q and k_new (FlashAttention's rotary_cos/rotary_sin, [rows, rotary_dim / 2] in
   * the dtype of q, rows >= the cache's capacity; only with k_new): pairs (2m, 2m+1) when interleaved,
   * else (m, m + rotary_dim/2); new key i of entry b at position cache_seqlens[b] + i (its cache row,
   * as FlashAttention-2 counts, cache_leftpad or not), query i there too when causal or windowed,
   * else every query at cache_seqlens[b].
   * Both NULL: none. */
  const void *rotary_cos, *rotary_sin;
  int64_t rotary_dim;
  int rotary_interleaved;
  void *stream; /* cudaStream_t for FLASHBOX_CUDA */
  /* Added 2026-12-01 (a struct_size of the struct without it is still accepted, as 0): elements
   * between batch entries' rows of ALiBi slopes, [batch, heads_q] when >= heads_q; 0: one [heads_q]
   * row for every entry. */
  int64_t alibi_batch_stride;
  /* Added 2026-12-06 (a struct_size of the struct without it is still accepted, as NULL): learnable
   * sinks, fp32 [heads_q] in the memory of `device`, or NULL: one logit per query head that joins
   * every row's softmax denominator with no value, as flashbox_attention_ext.learnable_sink:
   * lse = log(sum_j exp(s_j) + exp(sink)), o = sum_j exp(s_j - lse) v_j; a row that sees no key gets
   * o = 0 and lse = the sink. Checked finite on the cpu; not read on the host for cuda. */
  const float *learnable_sink;
  /* Added 2026-12-06 (a struct_size of the struct without them is still accepted: cache_dtype 0, no
   * descales): an FP8 KV cache, FlashAttention-3's flash_attn_with_kvcache(k_descale, v_descale).
   * cache_dtype: the dtype of k_cache and v_cache; 0 (FLASHBOX_FLOAT32) means the call's dtype, as
   * before. FLASHBOX_FLOAT8_E4M3 (one byte per element; cache strides in elements = bytes) is taken
   * with dtype = FLASHBOX_BFLOAT16 or FLASHBOX_FLOAT16 (q, k_new, v_new and o stay in dtype); any
   * other value, and e4m3 with dtype fp32, is refused with FLASHBOX_ERR_UNSUPPORTED_DTYPE (e5m2 is not
   * a flashbox_dtype). No rotary with an fp8 cache (FLASHBOX_ERR_UNSUPPORTED_IMPL); on cuda head_dim
   * must be a multiple of 16 (16-byte rows of e4m3).
   * k_descale, v_descale: fp32 [batch, heads_kv] in the memory of `device`, element (b, g) at
   * b * stride[0] + g * stride[1] of k_descale_stride / v_descale_stride (elements; 0 broadcasts, both
   * 0 is one per-tensor scale); NULL means 1.0 (its strides must then be 0). Only with an fp8 cache
   * (otherwise they must be NULL and 0). The attention runs on the dequantized cache
   *   k_real[b, j, g, :] = float(k_cache_e4m3[entry, row, g, :]) * k_descale[b, g]   (v alike)
   * with b the batch entry (not the cache entry it maps to). Appended k_new/v_new (dtype) are
   * quantized on write with the same scales: e4m3 = round-to-nearest-even(float(k_new) /
   * k_descale[b, g]) in fp32, saturated to +-448 (a value past 448, or an infinity, is stored as
   * +-448; NaN stays NaN); a descale of 0 writes 0 (the quotient is not formed). Descales must be
   * finite and >= 0: checked on the cpu (refused with FLASHBOX_ERR_INVALID_ARGUMENT, nothing
   * written); on cuda they stay in device memory and are not read on the host (a bad value gives an
   * undefined result, not a fault). Expect the error of the e4m3 rounding of K and V (a relative
   * step of 2^-4, so about 2-3 % relative error of o at per-tensor scales; docs/decode.md). */
  flashbox_dtype cache_dtype;
  const float *k_descale, *v_descale;
  int64_t k_descale_stride[2], v_descale_stride[2]; /* batch, kv head (elements) */
  /* Added 2026-12-07 (a struct_size of the struct without them is still accepted: NULL / 0, off):
   * FlashAttention-3's qv, head_dim_v and attention_chunk of flash_attn_with_kvcache.
   * head_dim_v: V's and O's head dim (0: head_dim). v_cache and v_new then have rows of head_dim_v
   * elements and o [batch, seqlen_q, heads_q, head_dim_v]; q, k_cache, k_new keep head_dim.
   * qv: NULL, or a second query against V (MLA's absorbed decode), [batch, seqlen_q, heads_q,
   * head_dim_v] in dtype with strides qv_stride (batch, token, head; elements; all 0 when qv is
   * NULL): scores become scale * (q_i . k_j + qv_i . v_j), and softmax_scale 0 then means
   * 1 / sqrt(head_dim + head_dim_v). Rotary turns q and k_new only, never qv.
   * attention_chunk > 0: chunked local attention, with positions counted from P_b = cache_leftpad[b]
   * (0 without it), as FlashAttention-3 counts them: query i at p = L_b - seqlen_q + i - P_b sees only
   * the keys j with floor(p / attention_chunk) * attention_chunk <= j - P_b < that + attention_chunk,
   * intersected with causal and the window; 0: off.
   * Not with an fp8 cache (FLASHBOX_ERR_UNSUPPORTED_IMPL). device = cpu: head_dim (+ head_dim_v with
   * qv) up to 576. device = cuda: a call with any of them runs on the explicit forward (one kernel
   * for any head dims; correct, not tuned for speed: src/cuda/explicit), head_dim up to 576 and
   * head_dim_v up to 512, both multiples of 8; the decode kernels keep every other call. On a Hopper
   * (sm90) MLA decode has its own kernel: one KV head, bf16 or fp16, qv with head_dim 64 and
   * head_dim_v 512, or head_dim 576 without qv and v_cache the first 512 columns of k_cache (same
   * pointer and strides), no append, window, softcap, ALiBi, sinks, attention_chunk or leftpad
   * (docs/decode.md). */
  const void *qv;
  int64_t qv_stride[3];
  int64_t head_dim_v;
  int64_t attention_chunk;
} flashbox_kvcache_args;
FLASHBOX_API int flashbox_attention_kvcache(const flashbox_kvcache_args *args); /* 0 on success */
/* The split count a call with these arguments would use (num_splits, or the library's choice when it
 * is 0; 1 on the CPU), for tools; the negated error code on invalid arguments. */
FLASHBOX_API int flashbox_kvcache_num_splits(const flashbox_kvcache_args *args);

/* ---- Combine of split partial results (FlashAttention-3's flash_attn_combine) -------------------
 * A caller that split the keys of an attention into num_splits parts has, per part s, the part's
 * normalised output O_s and its log-sum-exp L_s (natural log; -inf: the part saw no key). The
 * combine returns the attention over all the keys:
 *   L = log sum_s exp(L_s),   O = sum_s exp(L_s - L) O_s,
 * with a part of L_s = -inf skipped (its O_s is never read, so it may hold anything), and O = 0,
 * L = -inf for a row whose parts all are -inf.
 *   out_partial  fp32 [num_splits, batch, seqlen, heads, head_dim_v], strides (elements) split, batch,
 *                token, head; the head_dim_v elements of a head contiguous
 *   lse_partial  fp32 [num_splits, batch, seqlen, heads], strides split, batch, token, head
 *   out          out_dtype (fp32, fp16 or bf16) [batch, seqlen, heads, head_dim_v], strides batch,
 *                token, head
 *   lse          NULL, or fp32 [batch, heads, seqlen] (dense, as the attention calls write it)
 * The outputs overlap no input. device = cpu or cuda (every pointer in device memory; one launch
 * on `stream`, any num_splits and head_dim_v). */
typedef struct {
  int32_t struct_size; /* sizeof(flashbox_combine_args) */
  flashbox_device device;
  flashbox_dtype out_dtype;
  int64_t num_splits, batch, seqlen, heads, head_dim_v;
  const float *out_partial;
  int64_t out_partial_stride[4];
  const float *lse_partial;
  int64_t lse_partial_stride[4];
  void *out;
  int64_t out_stride[3];
  float *lse;
  void *stream; /* cudaStream_t for FLASHBOX_CUDA */
} flashbox_combine_args;
FLASHBOX_API int flashbox_attention_combine(const flashbox_combine_args *args); /* 0 on success */

#ifdef __cplusplus
}
#endif
#endif /* FLASHBOX_FLASHBOX_H */
