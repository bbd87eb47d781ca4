#include "gpt2/checkpoint/safetensors.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <fstream>

#include "core/dtype.hpp"
#include "gpt2/error.hpp"

namespace flashbox::gpt2 {
namespace {

// Element sizes of the dtypes safetensors defines; 0 for a name it does not.
int64_t dtype_bytes(const std::string &d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the format's own limit

}  // namespace

int64_t SafetensorsEntry::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile::SafetensorsFile(std::string path) : path_(std::move(path)) {
  std::error_code ec;
  const uint64_t file_size = std::filesystem::file_size(path_, ec);
  if (ec) throw Gpt2Error(fmt::format("cannot open safetensors file '{}': {}", path_, ec.message()));
  std::ifstream in(path_, std::ios::binary);
  if (!in) throw Gpt2Error(fmt::format("cannot open safetensors file '{}'", path_));
  if (file_size < 8)
    throw Gpt2Error(
        fmt::format("'{}' is truncated: {} bytes, shorter than the 8-byte header length", path_, file_size));
  unsigned char len_bytes[8];
  in.read(reinterpret_cast<char *>(len_bytes), 8);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len_bytes[i];
  if (header_len > kMaxHeaderBytes || header_len > file_size - 8)
    throw Gpt2Error(fmt::format("'{}' is not a valid safetensors file: header length {} bytes, file {} bytes", path_,
                                header_len, file_size));
  std::string header(header_len, '\0');
  in.read(header.data(), std::streamsize(header_len));
  if (!in) throw Gpt2Error(fmt::format("'{}': could not read the {}-byte header", path_, header_len));
  data_start_ = 8 + header_len;
  const uint64_t data_size = file_size - data_start_;

  nlohmann::json j;
  try {
    j = nlohmann::json::parse(header);
  } catch (const nlohmann::json::exception &e) {
    throw Gpt2Error(fmt::format("'{}': the safetensors header is not valid JSON ({})", path_, e.what()));
  }
  if (!j.is_object()) throw Gpt2Error(fmt::format("'{}': the safetensors header is not a JSON object", path_));
  for (const auto &[name, e] : j.items()) {
    if (name == "__metadata__") {
      metadata_ = e;
      continue;
    }
    // Structured bindings cannot be captured before C++20 compilers implement P1091 (clang 14 does not).
    const std::string &tensor = name;
    auto bad = [&](const std::string &why) {
      return Gpt2Error(fmt::format("'{}': tensor '{}' in the header: {}", path_, tensor, why));
    };
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
      throw bad("needs dtype, shape and data_offsets");
    if (!e["dtype"].is_string()) throw bad("dtype is not a string");
    SafetensorsEntry entry;
    entry.dtype = e["dtype"].get<std::string>();
    if (!e["shape"].is_array()) throw bad("shape is not an array");
    for (const auto &d : e["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > (int64_t(1) << 40))
        throw bad("shape holds a value that is not a small non-negative integer");
      entry.shape.push_back(d.get<int64_t>());
    }
    const auto &off = e["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      throw bad("data_offsets is not a pair of non-negative integers");
    entry.begin = off[0].get<uint64_t>();
    entry.end = off[1].get<uint64_t>();
    if (entry.begin > entry.end || entry.end > data_size)
      throw bad(fmt::format("data_offsets [{}, {}] lie outside the {} data bytes (truncated file?)", entry.begin,
                            entry.end, data_size));
    // Each dimension is below 2^40 but their product may not be: count in long double first.
    long double count = 1;
    for (int64_t d : entry.shape) count *= (long double)d;
    if (count > (long double)(int64_t(1) << 50)) throw bad("shape has more elements than any file can hold");
    const int64_t elem = dtype_bytes(entry.dtype);
    if (elem > 0 && uint64_t(entry.numel()) * uint64_t(elem) != entry.end - entry.begin)
      throw bad(fmt::format("{} bytes for shape [{}] of {} ({} bytes expected)", entry.end - entry.begin,
                            fmt::join(entry.shape, ", "), entry.dtype, entry.numel() * elem));
    entries_.emplace(name, std::move(entry));
  }
}

const SafetensorsEntry *SafetensorsFile::find(const std::string &name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

void SafetensorsFile::read_f32(const std::string &name, std::span<const int64_t> expected_shape, float *out) const {
  const SafetensorsEntry *e = find(name);
  if (!e) throw Gpt2Error(fmt::format("'{}': tensor '{}' is missing", path_, name));
  if (!std::equal(e->shape.begin(), e->shape.end(), expected_shape.begin(), expected_shape.end()))
    throw Gpt2Error(fmt::format("'{}': tensor '{}' has shape [{}], expected [{}]", path_, name,
                                fmt::join(e->shape, ", "), fmt::join(expected_shape, ", ")));
  flashbox_dtype t;
  if (e->dtype == "F32")
    t = FLASHBOX_FLOAT32;
  else if (e->dtype == "F16")
    t = FLASHBOX_FLOAT16;
  else if (e->dtype == "BF16")
    t = FLASHBOX_BFLOAT16;
  else
    throw Gpt2Error(
        fmt::format("'{}': tensor '{}' has dtype {}; only F32, F16 and BF16 are read", path_, name, e->dtype));
  std::ifstream in(path_, std::ios::binary);
  in.seekg(std::streamoff(data_start_ + e->begin));
  std::vector<char> raw(e->end - e->begin);
  in.read(raw.data(), std::streamsize(raw.size()));
  if (!in) throw Gpt2Error(fmt::format("'{}': short read of tensor '{}'", path_, name));
  cpu::load_row_as_float(raw.data(), t, 0, e->numel(), out);
}

void write_safetensors(const std::string &path, const std::vector<SafetensorsTensor> &tensors, const std::string &dtype,
                       const std::map<std::string, std::string> &metadata) {
  flashbox_dtype t;
  if (dtype == "F32")
    t = FLASHBOX_FLOAT32;
  else if (dtype == "F16")
    t = FLASHBOX_FLOAT16;
  else if (dtype == "BF16")
    t = FLASHBOX_BFLOAT16;
  else
    throw Gpt2Error(fmt::format("safetensors writer: dtype '{}' is not one of F32, F16, BF16", dtype));
  const int64_t elem = cpu::dtype_size(t);

  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto &tensor : tensors) {
    int64_t n = 1;
    for (int64_t d : tensor.shape) n *= d;
    header[tensor.name] = {{"dtype", dtype},
                           {"shape", tensor.shape},
                           {"data_offsets", {offset, offset + uint64_t(n * elem)}}};
    offset += uint64_t(n * elem);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data section 8-byte aligned

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Gpt2Error(fmt::format("cannot write '{}'", path));
  unsigned char len_bytes[8];
  for (int i = 0; i < 8; ++i) len_bytes[i] = uint8_t(uint64_t(text.size()) >> (8 * i));
  out.write(reinterpret_cast<const char *>(len_bytes), 8);
  out.write(text.data(), std::streamsize(text.size()));
  std::vector<char> buf;
  for (const auto &tensor : tensors) {
    int64_t n = 1;
    for (int64_t d : tensor.shape) n *= d;
    buf.resize(size_t(n * elem));
    cpu::store_row_from_float(buf.data(), t, 0, n, tensor.data);
    out.write(buf.data(), std::streamsize(buf.size()));
  }
  out.flush();
  if (!out) throw Gpt2Error(fmt::format("writing '{}' failed (disk full?)", path));
}

}  // namespace flashbox::gpt2
