// The disk cache of compiled mods: one file per key (the SHA-256, in hex, of everything the CUBIN
// depends on: flashbox's version, NVRTC's version, the architecture, the options and the whole
// translation unit; mod_build.cpp makes it), DIR/KEY.cubin, laid out as
//   8 bytes  "FBXMOD01"
//   8 bytes  payload size, little-endian
//  32 bytes  SHA-256 of the payload
//  32 bytes  the key itself (a file copied under another name is not taken for that name)
//   payload  the CUBIN
// A file that is shorter or longer than its header says, or whose payload does not hash to its
// header, or whose key differs, is a miss: the caller compiles again and the store replaces it.
// Stores write a temporary file in DIR and rename it over the entry (atomic on POSIX), so a reader
// never sees half an entry and concurrent writers of one key leave one whole file.
#pragma once
#include <string>
#include <vector>

namespace flashbox::jit {

// True and the payload in `image` when DIR/KEY.cubin is a whole, matching entry.
bool cache_load(const std::string &dir, const std::string &key, std::vector<char> &image);
// True when the entry was written (DIR created if missing); false, and nothing left behind, when DIR
// cannot be created or written: the caller keeps its CUBIN in memory.
bool cache_store(const std::string &dir, const std::string &key, const std::vector<char> &image);
std::string cache_path(const std::string &dir, const std::string &key);

}  // namespace flashbox::jit
