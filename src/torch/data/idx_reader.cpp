// Gzip + IDX reading for Fashion-MNIST. The whole file is inflated straight into one
// uint8 tensor: no intermediate copy, so the 47 MB training images cost 47 MB once.
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "pipetrain/util/error.h"
#include "readers.h"

namespace pipetrain::data {
namespace {

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using GzHandle = std::unique_ptr<gzFile_s, GzCloser>;

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// zlib's own message already starts with "path: "; keep only what follows.
std::string gzMessage(gzFile f, const std::string& path) {
  int errnum = Z_OK;
  std::string msg = gzerror(f, &errnum);
  if (msg.rfind(path + ": ", 0) == 0) msg = msg.substr(path.size() + 2);
  return msg;
}

// Throws unless the stream is healthy. Truncation shows up as Z_BUF_ERROR ("unexpected
// end of file") and a bad CRC as Z_DATA_ERROR, both only once zlib reaches the spot.
void checkStream(gzFile f, const std::string& path) {
  int errnum = Z_OK;
  gzerror(f, &errnum);
  if (errnum != Z_OK) throw Error(path + ": corrupt or truncated gzip data (" + gzMessage(f, path) + ")");
}

void readExactly(gzFile f, const std::string& path, void* dst, size_t n, const std::string& what) {
  auto* p = static_cast<unsigned char*>(dst);
  while (n > 0) {
    const auto chunk = static_cast<unsigned>(std::min<size_t>(n, size_t{1} << 30));
    const int got = gzread(f, p, chunk);
    checkStream(f, path);
    if (got <= 0) throw Error(path + ": file ends in the middle of the " + what + " (truncated?)");
    p += got;
    n -= static_cast<size_t>(got);
  }
}

uint32_t bigEndian32(const unsigned char* b) {
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

}  // namespace

IdxArray readIdxGz(const std::string& path, uint32_t expected_magic) {
  GzHandle f(gzopen(path.c_str(), "rb"));
  if (!f) throw Error(path + ": cannot open (" + std::strerror(errno) + ")");
  gzbuffer(f.get(), 1u << 20);  // fewer, larger reads: inflating is then the only cost

  unsigned char word[4];
  readExactly(f.get(), path, word, 4, "IDX header");
  const uint32_t magic = bigEndian32(word);
  if (magic != expected_magic) {
    throw Error(path + ": not the expected IDX file: magic number " + hex32(magic) + ", expected " +
                hex32(expected_magic) + " (unsigned bytes, " + std::to_string(expected_magic & 0xFF) +
                " dimensions)");
  }

  IdxArray out;
  int64_t elements = 1;
  for (uint32_t d = 0; d < (magic & 0xFF); ++d) {
    readExactly(f.get(), path, word, 4, "IDX header");
    const uint32_t dim = bigEndian32(word);
    out.dims.push_back(dim);
    elements *= dim;
    // A corrupt header must not make us allocate terabytes; 4 GiB is far above any IDX file.
    if (elements > (int64_t{1} << 32)) throw Error(path + ": IDX dimensions too large (corrupt header?)");
  }

  out.data = torch::empty(out.dims, torch::kUInt8);
  readExactly(f.get(), path, out.data.data_ptr<uint8_t>(), static_cast<size_t>(elements), "data");

  // One more read reaches the gzip trailer, where zlib checks the CRC and length.
  unsigned char extra = 0;
  const int more = gzread(f.get(), &extra, 1);
  checkStream(f.get(), path);
  if (more > 0) throw Error(path + ": more data than the IDX dimensions say (corrupt header?)");
  return out;
}

}  // namespace pipetrain::data
