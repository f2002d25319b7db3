// The ranks' store's wire: length-prefixed frames over a blocking socket, every read and write
// bounded by a deadline in running time, and the few fields a request carries.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "hydro/hang_watch.h"
#include "hydro/status.h"

namespace hydro::store {

using Clock = std::chrono::steady_clock;
// Every wait of the store counts running time only: a job suspended for hours, a rank inside a
// wait included, times nothing out (hang_watch.h).
using Deadline = RunningDeadline;

constexpr const char* kProtocol = "hydro-store/1";
constexpr size_t kMaxFrame = 64u << 20;      // a request or a value
constexpr size_t kMaxHandshake = 64u << 10;  // a frame before the peer is authenticated

// Requests: op byte, u32 key length, key, argument. Replies: status byte, body.
// kGetAll's key is a list of keys (encode_list), and its reply a list of '+value' or '-' (missing).
enum Op : char { kSet = 'S', kGet = 'G', kAdd = 'A', kDelete = 'D', kGetAll = 'W' };
enum Reply : char { kOk = 'K', kTimeout = 'T', kError = 'E' };

Status send_frame(int fd, const std::string& payload, Deadline& deadline);
// Code::not_found when the peer closed the connection before a frame began.
Status recv_frame(int fd, size_t max, Deadline& deadline, std::string* payload);

std::string request(Op op, const std::string& key, const std::string& arg);
// Splits a request; false if it is malformed.
bool parse_request(const std::string& frame, Op* op, std::string* key, std::string* arg);

std::string encode_i64(int64_t v);
// A u32 count, then each item as a u32 length and its bytes.
std::string encode_list(const std::vector<std::string>& items);
bool decode_list(const std::string& s, std::vector<std::string>* items);
bool decode_i64(const std::string& s, int64_t* v);

// 32 random bytes from the kernel, as hex.
Status nonce(std::string* hex);

}  // namespace hydro::store
