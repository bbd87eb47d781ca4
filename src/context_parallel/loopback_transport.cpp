// The loopback transport: N simulated ranks in one process. Posts are queued; flush() matches every
// send with its receive (k-th send from a to b with b's k-th receive from a, as NCCL does) and runs
// the copies and collectives. On a GPU the round is a barrier in stream order: a transfer stream
// waits for an event recorded on every posting stream, copies, and every posting stream waits for
// the transfer stream's event, so a rank's later work on that stream sees its data, as with NCCL.
// On the CPU the same copies simply run in flush().
#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "context_parallel/cp_error.hpp"
#include "context_parallel/transport.hpp"

namespace flashbox::cp {
namespace {

class LoopbackTransport final : public Transport {
 public:
  LoopbackTransport(DeviceOps &ops, int world) : ops_(ops), world_(world) {}
  ~LoopbackTransport() override {
    for (Event e : events_) ops_.destroy_event(e);
    if (stream_) ops_.destroy_stream(stream_);
  }

  int init() {
    if (ops_.device() == FLASHBOX_CUDA) {
      if (int rc = ops_.create_stream(&stream_)) return rc;
      events_.resize(size_t(world_) + 1, nullptr);
      for (Event &e : events_)
        if (int rc = ops_.create_event(&e)) return rc;
    }
    return 0;
  }

  int world() const override { return world_; }
  int group_begin(int) override { return 0; }
  int send(int rank, const void *buf, size_t bytes, int peer, Stream s) override {
    posts_.push_back({Kind::SEND, rank, peer, buf, nullptr, bytes, s});
    return 0;
  }
  int recv(int rank, void *buf, size_t bytes, int peer, Stream s) override {
    posts_.push_back({Kind::RECV, rank, peer, nullptr, buf, bytes, s});
    return 0;
  }
  int group_end(int, Stream) override { return 0; }
  int all_gather(int rank, const void *send, void *recv, size_t bytes, Stream s) override {
    posts_.push_back({Kind::ALL_GATHER, rank, -1, send, recv, bytes, s});
    return 0;
  }
  int reduce_scatter_sum(int rank, const float *send, float *recv, size_t count, Stream s) override {
    posts_.push_back({Kind::REDUCE_SCATTER, rank, -1, send, recv, count, s});
    return 0;
  }

  int flush() override {
    if (posts_.empty()) return 0;
    std::vector<Post> posts;
    posts.swap(posts_);
    const bool gpu = ops_.device() == FLASHBOX_CUDA;
    // Every posting stream's work so far comes before the transfers.
    std::vector<Stream> streams;
    for (const Post &p : posts)
      if (std::find(streams.begin(), streams.end(), p.stream) == streams.end()) streams.push_back(p.stream);
    if (gpu) {
      while (events_.size() < streams.size() + 1) {
        Event e = nullptr;
        if (int rc = ops_.create_event(&e)) return rc;
        events_.insert(events_.begin(), e);
      }
      for (size_t i = 0; i < streams.size(); ++i) {
        if (int rc = ops_.record(events_[i], streams[i])) return rc;
        if (int rc = ops_.wait(stream_, events_[i])) return rc;
      }
    }
    if (int rc = run(posts)) return rc;
    if (gpu) {
      Event done = events_.back();
      if (int rc = ops_.record(done, stream_)) return rc;
      for (Stream s : streams)
        if (int rc = ops_.wait(s, done)) return rc;
    }
    return 0;
  }

 private:
  enum class Kind { SEND, RECV, ALL_GATHER, REDUCE_SCATTER };
  struct Post {
    Kind kind;
    int rank, peer;
    const void *src;
    void *dst;
    size_t size;  // bytes, or floats for REDUCE_SCATTER
    Stream stream;
  };

  int run(const std::vector<Post> &posts) {
    // Point-to-point: the k-th send a -> b pairs with b's k-th receive from a.
    std::map<std::pair<int, int>, std::vector<const Post *>> sends, recvs;
    std::vector<const Post *> gathers, scatters;
    for (const Post &p : posts) {
      switch (p.kind) {
        case Kind::SEND: sends[{p.rank, p.peer}].push_back(&p); break;
        case Kind::RECV: recvs[{p.peer, p.rank}].push_back(&p); break;
        case Kind::ALL_GATHER: gathers.push_back(&p); break;
        case Kind::REDUCE_SCATTER: scatters.push_back(&p); break;
      }
    }
    for (auto &[pair, list] : sends) {
      auto it = recvs.find(pair);
      if (it == recvs.end() || it->second.size() != list.size())
        return fail(FLASHBOX_ERR_INTERNAL, "loopback: sends from rank " + std::to_string(pair.first) + " to rank " +
                                               std::to_string(pair.second) + " have no matching receives");
      for (size_t k = 0; k < list.size(); ++k) {
        const Post &s = *list[k], &r = *it->second[k];
        if (s.size != r.size)
          return fail(FLASHBOX_ERR_INTERNAL, "loopback: send of " + std::to_string(s.size) +
                                                 " bytes met a receive of " + std::to_string(r.size));
        if (int rc = ops_.copy_bytes(r.dst, s.src, s.size, stream_)) return rc;
      }
      recvs.erase(it);
    }
    if (!recvs.empty()) return fail(FLASHBOX_ERR_INTERNAL, "loopback: a receive has no matching send");
    if (!gathers.empty()) {
      if (int rc = check_collective(gathers, "all_gather")) return rc;
      for (const Post *dst : gathers)
        for (const Post *src : gathers)
          if (int rc = ops_.copy_bytes(static_cast<char *>(dst->dst) + size_t(src->rank) * src->size, src->src,
                                       src->size, stream_))
            return rc;
    }
    if (!scatters.empty()) {
      if (int rc = check_collective(scatters, "reduce_scatter")) return rc;
      for (const Post *dst : scatters) {
        RowCopy c;
        c.width = int64_t(dst->size);
        c.dst = dst->dst;
        if (int rc = ops_.copy_rows(c, stream_)) return rc;  // zero
        c.accumulate = true;
        for (const Post *src : scatters) {
          c.src = static_cast<const float *>(src->src) + size_t(dst->rank) * dst->size;
          if (int rc = ops_.copy_rows(c, stream_)) return rc;
        }
      }
    }
    return 0;
  }

  int check_collective(const std::vector<const Post *> &list, const char *name) {
    if (int(list.size()) != world_)
      return fail(FLASHBOX_ERR_INTERNAL, std::string("loopback: ") + name + " posted by " +
                                             std::to_string(list.size()) + " of " + std::to_string(world_) + " ranks");
    for (const Post *p : list)
      if (p->size != list[0]->size)
        return fail(FLASHBOX_ERR_INTERNAL, std::string("loopback: ") + name + " sizes differ");
    return 0;
  }

  DeviceOps &ops_;
  int world_;
  Stream stream_ = nullptr;
  std::vector<Event> events_;
  std::vector<Post> posts_;
};

}  // namespace

std::unique_ptr<Transport> make_loopback_transport(DeviceOps &ops, int world) {
  auto t = std::make_unique<LoopbackTransport>(ops, world);
  if (t->init()) return nullptr;
  return t;
}

}  // namespace flashbox::cp
