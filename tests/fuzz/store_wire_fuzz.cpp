// The ranks' store's wire (bytes from the network): a request, a list and a number either decode
// and then encode back to the very same bytes, or are refused; nothing else.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_check.h"
#include "store_wire.h"

namespace store = hydro::store;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  store::Op op{};
  std::string key, arg;
  if (store::parse_request(bytes, &op, &key, &arg)) FUZZ_CHECK(store::request(op, key, arg) == bytes);
  std::vector<std::string> items;
  if (store::decode_list(bytes, &items)) FUZZ_CHECK(store::encode_list(items) == bytes);
  int64_t v = 0;
  if (store::decode_i64(bytes, &v)) FUZZ_CHECK(store::encode_i64(v) == bytes);
  return 0;
}
