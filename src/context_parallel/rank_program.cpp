// The rank programs' factory (ring or all-gather) and the driver that steps every rank this process
// holds through the phases of rank_program.hpp.
#include "context_parallel/rank_program.hpp"

#include "context_parallel/program_base.hpp"

namespace flashbox::cp {

std::unique_ptr<RankProgram> make_forward_program(const RankSetup &r, const flashbox_attention_args &args) {
  if (r.variant == FLASHBOX_CP_ALL_GATHER) return make_all_gather_forward(r, args);
  return make_ring_forward(r, args);
}

std::unique_ptr<RankProgram> make_backward_program(const RankSetup &r, const flashbox_attention_grad_args &grad) {
  if (r.variant == FLASHBOX_CP_ALL_GATHER) return make_all_gather_backward(r, grad);
  return make_ring_backward(r, grad);
}

int run_programs(std::vector<std::unique_ptr<RankProgram>> &ranks, Transport &transport) {
  for (auto &p : ranks)
    if (int rc = p->start()) return rc;
  const int steps = ranks.front()->steps();
  for (int s = 0; s <= steps; ++s) {
    for (auto &p : ranks)
      if (int rc = p->post_round(s)) return rc;
    if (int rc = transport.flush()) return rc;
    for (auto &p : ranks)
      if (int rc = p->after_round(s)) return rc;
    if (s < steps)
      for (auto &p : ranks)
        if (int rc = p->compute(s)) return rc;
  }
  for (auto &p : ranks)
    if (int rc = p->finish()) return rc;
  return 0;
}

}  // namespace flashbox::cp
