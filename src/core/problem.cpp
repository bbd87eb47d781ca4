// See problem.hpp.
#include "core/problem.hpp"

#include "core/softmax_scale.hpp"

namespace flashbox::detail {

Problem make_problem(const flashbox_attention_args &a) { return make_problem(a, core::causal_mods(a.causal != 0)); }

GradProblem make_grad_problem(const flashbox_attention_grad_args &g) {
  return make_grad_problem(g, core::causal_mods(g.fwd.causal != 0));
}

Problem make_problem(const flashbox_attention_args &a, const core::ScoreMods &mods) {
  Problem p{};
  p.device = a.device, p.dtype = a.dtype, p.impl = a.impl;
  p.batch = a.batch, p.seqlen_q = a.seqlen_q, p.seqlen_k = a.seqlen_k;
  p.heads_q = a.heads_q, p.heads_kv = a.heads_kv, p.head_dim = a.head_dim, p.head_dim_v = a.head_dim;
  p.group = a.heads_q / a.heads_kv;
  p.q = a.q, p.k = a.k, p.v = a.v, p.o = a.o, p.lse = a.lse;
  for (int i = 0; i < 3; ++i) {
    p.q_stride[i] = a.q_stride[i], p.k_stride[i] = a.k_stride[i];
    p.v_stride[i] = a.v_stride[i], p.o_stride[i] = a.o_stride[i];
  }
  const SoftmaxScale scale = resolve_softmax_scale(a.softmax_scale, a.head_dim);
  p.scale = scale.scale, p.scale_log2 = scale.scale_log2;
  p.causal = a.causal;
  p.mods = mods;
  p.stream = a.stream;
  return p;
}

Problem make_problem(const flashbox_attention_args &a, const core::ScoreMods &mods, int64_t head_dim_v) {
  Problem p = make_problem(a, mods);
  if (head_dim_v != 0) p.head_dim_v = head_dim_v;
  return p;
}

GradProblem make_grad_problem(const flashbox_attention_grad_args &g, const core::ScoreMods &mods) {
  GradProblem p{};
  p.fwd = make_problem(g.fwd, mods);
  p.dout = g.dout, p.dq = g.dq, p.dk = g.dk, p.dv = g.dv;
  for (int i = 0; i < 3; ++i) {
    p.dout_stride[i] = g.dout_stride[i], p.dq_stride[i] = g.dq_stride[i];
    p.dk_stride[i] = g.dk_stride[i], p.dv_stride[i] = g.dv_stride[i];
  }
  p.deterministic = g.deterministic;
  return p;
}

GradProblem make_grad_problem(const flashbox_attention_grad_args &g, const core::ScoreMods &mods, int64_t head_dim_v) {
  GradProblem p = make_grad_problem(g, mods);
  if (head_dim_v != 0) p.fwd.head_dim_v = head_dim_v;
  return p;
}

std::string extension_in_use(const Problem &p) {
  const core::ScoreMods &m = p.mods;
  if (p.varlen()) return "variable-length batches (cu_seqlens)";
  if (m.window_left >= 0) return "sliding window (window_left = " + std::to_string(m.window_left) + ")";
  if (m.window_right >= 0 && !(p.causal && m.window_right == 0))
    return "sliding window (window_right = " + std::to_string(m.window_right) + ")";
  if (m.softcap != 0.0f) return "softcap (softcap = " + std::to_string(m.softcap) + ")";
  if (m.alibi_slopes) return "ALiBi (alibi_slopes)";
  if (p.mod_bits) return "mask mods (mask_mod)";
  if (m.chunk > 0) return "attention chunk (attention_chunk = " + std::to_string(m.chunk) + ")";
  if (m.sinks) return "learnable sinks (learnable_sink)";
  return mask_family_in_use(p);
}

std::string mask_family_in_use(const Problem &p) {
  const core::ScoreMods &m = p.mods;
  if (p.mod_bits) return "mask mods (mask_mod)";
  if (m.chunk > 0) return "attention chunk (attention_chunk = " + std::to_string(m.chunk) + ")";
  if (m.doc_q) return "document masks (document_ids_q/k)";
  if (m.prefix) return "prefix-LM masks (prefix_lengths)";
  if (p.seqused_q || p.seqused_k) return "used lengths (seqused_q/k)";
  if (p.block_mask.kv_num_blocks) return "block masks (block_mask)";
  return "";
}

}  // namespace flashbox::detail
