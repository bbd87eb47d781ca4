// The safetensors container (Hugging Face): 8-byte little-endian header length, a JSON header of
// name -> {dtype, shape, data_offsets} (offsets relative to the byte after the header), then the
// raw tensor bytes. This reader checks every entry against the file before any tensor is read.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace flashbox::gpt2 {

struct SafetensorsEntry {
  std::string dtype;  // "F32", "F16", "BF16", ... as written
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range in the data section
  int64_t numel() const;
};

class SafetensorsFile {
 public:
  // Throws Gpt2Error for a missing, truncated or corrupt file (header length past the end, bad JSON,
  // an entry without dtype/shape/offsets, offsets past the end, a byte size that does not match the
  // shape and dtype).
  explicit SafetensorsFile(std::string path);

  const std::string &path() const { return path_; }
  const std::map<std::string, SafetensorsEntry> &entries() const { return entries_; }
  const nlohmann::json &metadata() const { return metadata_; }  // "__metadata__" or null
  const SafetensorsEntry *find(const std::string &name) const;

  // Reads an F32/F16/BF16 tensor converted to fp32 into `out` (numel elements). Throws Gpt2Error for
  // another dtype, a shape other than `expected_shape`, or a short read.
  void read_f32(const std::string &name, std::span<const int64_t> expected_shape, float *out) const;

 private:
  std::string path_;
  uint64_t data_start_ = 0;
  std::map<std::string, SafetensorsEntry> entries_;
  nlohmann::json metadata_;
};

struct SafetensorsTensor {
  std::string name;
  std::vector<int64_t> shape;
  const float *data;  // numel fp32 values, converted to the file's dtype on write
};

// Writes `tensors` in order as `dtype` ("F32", "F16" or "BF16"), with string metadata. Throws
// Gpt2Error when the file cannot be written.
void write_safetensors(const std::string &path, const std::vector<SafetensorsTensor> &tensors, const std::string &dtype,
                       const std::map<std::string, std::string> &metadata = {});

}  // namespace flashbox::gpt2
