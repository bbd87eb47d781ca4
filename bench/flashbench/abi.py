"""libflashbox.so through ctypes: the plain C entry points only (flashbox_attention_forward/_backward,
their _ext forms and flashbox_attention_kvcache), whose structs are stable, so one harness times any
build of the library. The structs mirror include/flashbox/flashbox.h field for field."""
import ctypes
import os

I64x3 = ctypes.c_int64 * 3
P = ctypes.c_void_p
CUDA, FP16, BF16, FLASH = 1, 1, 2, 3


class AttentionArgs(ctypes.Structure):  # flashbox_attention_args
    _fields_ = [("device", ctypes.c_int), ("dtype", ctypes.c_int), ("impl", ctypes.c_int),
                ("batch", ctypes.c_int64), ("seqlen_q", ctypes.c_int64), ("seqlen_k", ctypes.c_int64),
                ("heads_q", ctypes.c_int64), ("heads_kv", ctypes.c_int64), ("head_dim", ctypes.c_int64),
                ("q", P), ("k", P), ("v", P), ("o", P), ("lse", P),
                ("q_stride", I64x3), ("k_stride", I64x3), ("v_stride", I64x3), ("o_stride", I64x3),
                ("softmax_scale", ctypes.c_float), ("causal", ctypes.c_int), ("stream", P)]


class GradArgs(ctypes.Structure):  # flashbox_attention_grad_args
    _fields_ = [("fwd", AttentionArgs), ("dout", P), ("dout_stride", I64x3), ("dq", P), ("dk", P), ("dv", P),
                ("dq_stride", I64x3), ("dk_stride", I64x3), ("dv_stride", I64x3), ("deterministic", ctypes.c_int)]


class Ext(ctypes.Structure):  # flashbox_attention_ext
    _fields_ = [("struct_size", ctypes.c_int32), ("window_left", ctypes.c_int32), ("window_right", ctypes.c_int32),
                ("softcap", ctypes.c_float), ("alibi_slopes", P), ("alibi_batch_stride", ctypes.c_int64),
                ("cu_seqlens_q", P), ("cu_seqlens_k", P), ("max_seqlen_q", ctypes.c_int64),
                ("max_seqlen_k", ctypes.c_int64), ("head_dim_v", ctypes.c_int64),
                ("attention_chunk", ctypes.c_int64), ("seqused_q", P), ("seqused_k", P),
                ("qv", P), ("qv_stride", ctypes.c_int64 * 3), ("learnable_sink", P), ("dsink", P),
                ("num_splits", ctypes.c_int64), ("out_partial", P), ("lse_partial", P),
                ("document_ids_q", P), ("document_ids_k", P), ("prefix_lengths", P), ("block_mask", P),
                ("out_dtype", ctypes.c_int), ("q_descale", P), ("k_descale", P), ("v_descale", P),
                ("q_descale_stride", ctypes.c_int64 * 2), ("k_descale_stride", ctypes.c_int64 * 2),
                ("v_descale_stride", ctypes.c_int64 * 2), ("mask_mod", P), ("mask_mod_aux", P),
                ("score_mod", P), ("score_mod_aux", P), ("mask_mod_broadcast", ctypes.c_int32)]


class KvcacheArgs(ctypes.Structure):  # flashbox_kvcache_args
    _fields_ = [("struct_size", ctypes.c_int32), ("device", ctypes.c_int), ("dtype", ctypes.c_int),
                ("batch", ctypes.c_int64), ("seqlen_q", ctypes.c_int64), ("heads_q", ctypes.c_int64),
                ("heads_kv", ctypes.c_int64), ("head_dim", ctypes.c_int64), ("q", P), ("q_stride", I64x3),
                ("k_cache", P), ("v_cache", P), ("k_cache_stride", I64x3), ("v_cache_stride", I64x3),
                ("cache_entries", ctypes.c_int64), ("cache_rows", ctypes.c_int64), ("cache_seqlens", P),
                ("block_table", P), ("max_blocks_per_seq", ctypes.c_int64), ("block_table_stride", ctypes.c_int64),
                ("cache_batch_idx", P), ("cache_leftpad", P), ("k_new", P), ("v_new", P),
                ("seqlen_new", ctypes.c_int64), ("k_new_stride", I64x3), ("v_new_stride", I64x3),
                ("o", P), ("o_stride", I64x3), ("lse", P), ("softmax_scale", ctypes.c_float),
                ("causal", ctypes.c_int), ("has_window", ctypes.c_int), ("window_left", ctypes.c_int64),
                ("window_right", ctypes.c_int64), ("softcap", ctypes.c_float), ("alibi_slopes", P),
                ("num_splits", ctypes.c_int), ("tables_trusted", ctypes.c_int), ("rotary_cos", P),
                ("rotary_sin", P), ("rotary_dim", ctypes.c_int64), ("rotary_interleaved", ctypes.c_int),
                ("stream", P), ("alibi_batch_stride", ctypes.c_int64), ("learnable_sink", P),
                ("cache_dtype", ctypes.c_int), ("k_descale", P), ("v_descale", P),
                ("k_descale_stride", ctypes.c_int64 * 2), ("v_descale_stride", ctypes.c_int64 * 2),
                ("qv", ctypes.c_void_p), ("qv_stride", ctypes.c_int64 * 3), ("head_dim_v", ctypes.c_int64),
                ("attention_chunk", ctypes.c_int64)]


class BlockMaskTables(ctypes.Structure):  # flashbox_block_mask
    _fields_ = [("struct_size", ctypes.c_int32), ("batch", ctypes.c_int64), ("heads", ctypes.c_int64),
                ("q_block_size", ctypes.c_int64), ("kv_block_size", ctypes.c_int64),
                ("max_kv_blocks", ctypes.c_int64), ("max_q_blocks", ctypes.c_int64),
                ("kv_num_blocks", P), ("kv_indices", P), ("full_kv_num_blocks", P), ("full_kv_indices", P),
                ("q_num_blocks", P), ("q_indices", P), ("full_q_num_blocks", P), ("full_q_indices", P)]


class AuxDecl(ctypes.Structure):  # flashbox_aux_decl
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int), ("rank", ctypes.c_int32)]


class ModDesc(ctypes.Structure):  # flashbox_mod_desc
    _fields_ = [("struct_size", ctypes.c_int32), ("kind", ctypes.c_int), ("source", ctypes.c_char_p),
                ("function_name", ctypes.c_char_p), ("num_aux", ctypes.c_int32), ("aux", ctypes.POINTER(AuxDecl)),
                ("arch", ctypes.c_int32)]


class AuxTensor(ctypes.Structure):  # flashbox_aux_tensor
    _fields_ = [("data", P), ("dtype", ctypes.c_int), ("rank", ctypes.c_int32), ("sizes", ctypes.c_int64 * 4),
                ("strides", ctypes.c_int64 * 4), ("device", ctypes.c_int)]


class ModInfo(ctypes.Structure):  # flashbox_mod_info
    _fields_ = [("struct_size", ctypes.c_int32), ("from_cache", ctypes.c_int32), ("cached", ctypes.c_int32),
                ("num_archs", ctypes.c_int32), ("archs", ctypes.c_int32 * 4), ("cubin_bytes", ctypes.c_int64 * 4),
                ("seconds", ctypes.c_double), ("key", ctypes.c_char * 65)]


AUX_INT32, MOD_MASK = 0, 1


# The size of flashbox_kvcache_args before learnable_sink: every field this harness sets lies before it,
# and every library since that version accepts it, so one harness times old and new builds alike.
KVCACHE_ARGS_V2_SIZE = KvcacheArgs.learnable_sink.offset
# The whole struct, with the e4m3 cache's fields (cache_dtype, k/v_descale): only fp8 rows pass it, so
# the 16-bit rows still time builds from before them.
KVCACHE_ARGS_FP8_SIZE = ctypes.sizeof(KvcacheArgs)
FLOAT8_E4M3 = 3


class FlashboxError(RuntimeError):
    pass


def strides(t, layout):
    """flashbox's (batch, seq, head) strides of a 4-d torch tensor in layout "bhtd" or "bthd"."""
    s = t.stride()
    return I64x3(s[0], s[2], s[1]) if layout == "bhtd" else I64x3(s[0], s[1], s[2])


class Library:
    """One libflashbox.so. Calls return zero-argument closures over filled structs, so a timed call
    costs one ctypes call and no Python-side argument work."""

    def __init__(self, path):
        self.path = os.path.abspath(path)
        self.lib = lib = ctypes.CDLL(self.path)
        for name, args in (("flashbox_attention_forward", [ctypes.POINTER(AttentionArgs)]),
                           ("flashbox_attention_backward", [ctypes.POINTER(GradArgs)]),
                           ("flashbox_attention_forward_ext", [ctypes.POINTER(AttentionArgs), ctypes.POINTER(Ext)]),
                           ("flashbox_attention_backward_ext", [ctypes.POINTER(GradArgs), ctypes.POINTER(Ext)]),
                           ("flashbox_attention_kvcache", [ctypes.POINTER(KvcacheArgs)])):
            getattr(lib, name).argtypes, getattr(lib, name).restype = args, ctypes.c_int
        for name in ("flashbox_last_error", "flashbox_last_kernel", "flashbox_version"):
            getattr(lib, name).restype = ctypes.c_char_p
        self.version = lib.flashbox_version().decode()

    def check(self, rc):
        if rc != 0:
            raise FlashboxError(f"flashbox error {rc}: {self.lib.flashbox_last_error().decode()}")

    def last_kernel(self):
        return (self.lib.flashbox_last_kernel() or b"").decode()

    def attention_args(self, q, k, v, o, lse, causal, layout="bhtd", batch=None):
        import torch
        a = AttentionArgs()
        a.device, a.impl, a.causal, a.softmax_scale = CUDA, FLASH, int(causal), 0.0
        a.dtype = BF16 if q.dtype == torch.bfloat16 else FP16
        t, h = (2, 1) if layout == "bhtd" else (1, 2)
        a.batch = batch or q.shape[0]
        a.seqlen_q, a.seqlen_k, a.head_dim = q.shape[t], k.shape[t], q.shape[3]
        a.heads_q, a.heads_kv = q.shape[h], k.shape[h]
        a.q, a.k, a.v, a.o = q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr()
        a.lse = lse.data_ptr() if lse is not None else None
        a.q_stride, a.k_stride, a.v_stride, a.o_stride = (strides(x, layout) for x in (q, k, v, o))
        a.stream = torch.cuda.current_stream().cuda_stream
        return a

    @staticmethod
    def ext(window=(-1, -1), softcap=0.0, alibi=None, cu_q=None, cu_k=None, max_q=0, max_k=0, head_dim_v=0):
        e = Ext()
        e.struct_size, (e.window_left, e.window_right), e.softcap = ctypes.sizeof(Ext), window, softcap
        e.alibi_slopes = alibi.data_ptr() if alibi is not None else None
        e.cu_seqlens_q = cu_q.data_ptr() if cu_q is not None else None
        e.cu_seqlens_k = cu_k.data_ptr() if cu_k is not None else None
        e.max_seqlen_q, e.max_seqlen_k = max_q, max_k
        e.head_dim_v = head_dim_v  # 0: head_dim
        return e

    def mask_mod(self, source, name, aux=()):
        """flashbox_mod_create of a mask mod: (handle, flashbox_mod_info as a dict). aux: (name, rank)
        pairs of int32 tensors, in the order the call binds them."""
        decls = (AuxDecl * max(1, len(aux)))(*[AuxDecl(n.encode(), AUX_INT32, r) for n, r in aux])
        d = ModDesc(ctypes.sizeof(ModDesc), MOD_MASK, source.encode(), name.encode(), len(aux), decls, 0)
        handle = ctypes.c_void_p()
        self.lib.flashbox_mod_create.argtypes = [ctypes.POINTER(ModDesc), ctypes.POINTER(ctypes.c_void_p)]
        self.check(self.lib.flashbox_mod_create(ctypes.byref(d), ctypes.byref(handle)))
        info = ModInfo()
        info.struct_size = ctypes.sizeof(ModInfo)
        self.lib.flashbox_mod_get_info.argtypes = [ctypes.c_void_p, ctypes.POINTER(ModInfo)]
        self.check(self.lib.flashbox_mod_get_info(handle, ctypes.byref(info)))
        return handle, dict(seconds=info.seconds, from_cache=info.from_cache, cached=info.cached)

    def mod_destroy(self, handle):
        self.lib.flashbox_mod_destroy.argtypes = [ctypes.c_void_p]
        self.lib.flashbox_mod_destroy(handle)

    @staticmethod
    def aux_int32(t):
        """flashbox_aux_tensor of an int32 CUDA tensor (rank <= 4)."""
        a = AuxTensor()
        a.data, a.dtype, a.rank, a.device = t.data_ptr(), AUX_INT32, t.dim(), CUDA
        for i in range(t.dim()):
            a.sizes[i], a.strides[i] = t.shape[i], t.stride(i)
        return a

    def forward(self, args, ext=None):
        f, r = self.lib.flashbox_attention_forward, ctypes.byref(args)
        if ext is None:
            return lambda: self.check(f(r))
        fe, re = self.lib.flashbox_attention_forward_ext, ctypes.byref(ext)
        return lambda: self.check(fe(r, re))

    def backward(self, args, do, dq, dk, dv, layout="bhtd", ext=None, deterministic=0):
        g = GradArgs()
        g.fwd, g.deterministic = args, deterministic
        g.dout, g.dq, g.dk, g.dv = do.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr()
        g.dout_stride, g.dq_stride, g.dk_stride, g.dv_stride = (strides(x, layout) for x in (do, dq, dk, dv))
        f, r = self.lib.flashbox_attention_backward, ctypes.byref(g)
        if ext is None:
            return lambda: self.check(f(r))
        fe, re = self.lib.flashbox_attention_backward_ext, ctypes.byref(ext)
        return lambda: self.check(fe(r, re))

    def kvcache(self, q, k_cache, v_cache, cache_seqlens, o, block_table=None, causal=False, k_descale=None,
                v_descale=None, qv=None):
        """q [B, Tq, Hq, D]; caches [entries, rows, Hkv, D] (contiguous: entries = B; paged: pages of
        rows keys each through block_table [B, blocks]). An e4m3 cache (torch.float8_e4m3fn) takes fp32
        per-tensor descales ([1] tensors, or None for 1.0). A v_cache of another head dim sets head_dim_v
        (o then has its columns); qv [B, Tq, Hq, head_dim_v] adds qv . v to the scores (MLA decode)."""
        import torch
        a = KvcacheArgs()
        a.struct_size, a.device, a.dtype = KVCACHE_ARGS_V2_SIZE, CUDA, BF16 if q.dtype == torch.bfloat16 else FP16
        if k_cache.dtype == getattr(torch, "float8_e4m3fn", None):
            a.struct_size, a.cache_dtype = KVCACHE_ARGS_FP8_SIZE, FLOAT8_E4M3
            a.k_descale = k_descale.data_ptr() if k_descale is not None else None
            a.v_descale = v_descale.data_ptr() if v_descale is not None else None
        a.batch, a.seqlen_q, a.heads_q, a.head_dim = q.shape
        a.heads_kv = k_cache.shape[2]
        a.q, a.k_cache, a.v_cache, a.o = q.data_ptr(), k_cache.data_ptr(), v_cache.data_ptr(), o.data_ptr()
        a.q_stride, a.o_stride = strides(q, "bthd"), strides(o, "bthd")
        a.k_cache_stride, a.v_cache_stride = strides(k_cache, "bthd"), strides(v_cache, "bthd")
        a.cache_entries, a.cache_rows = k_cache.shape[0], k_cache.shape[1]
        a.cache_seqlens = cache_seqlens.data_ptr()
        if block_table is not None:
            a.block_table, a.max_blocks_per_seq = block_table.data_ptr(), block_table.shape[1]
            a.block_table_stride = block_table.stride(0)
        if qv is not None or v_cache.shape[3] != k_cache.shape[3]:
            a.struct_size, a.head_dim_v = ctypes.sizeof(KvcacheArgs), v_cache.shape[3]
            if qv is not None:
                a.qv, a.qv_stride = qv.data_ptr(), strides(qv, "bthd")
        a.causal, a.window_left, a.window_right, a.tables_trusted = int(causal), -1, -1, 1
        a.stream = torch.cuda.current_stream().cuda_stream
        f, r = self.lib.flashbox_attention_kvcache, ctypes.byref(a)
        return lambda: self.check(f(r))
