#include "munge_auth.h"

#include <munge.h>
#include <unistd.h>

#include <cstdlib>
#include <memory>

namespace hydro {
namespace {

using Ctx = std::unique_ptr<std::remove_pointer_t<munge_ctx_t>, decltype(&munge_ctx_destroy)>;

Status failure(const char* what, munge_err_t e, munge_ctx_t ctx) {
  std::string why = munge_ctx_strerror(ctx) ? munge_ctx_strerror(ctx) : munge_strerror(e);
  std::string msg = std::string("MUNGE ") + what + ": " + why;
  if (e == EMUNGE_SOCKET) msg += " (the ranks' store authenticates with MUNGE: is munged running on this node?)";
  return Status::io(msg);
}

}  // namespace

Status munge_seal(const std::string& payload, std::string* credential) {
  Ctx ctx(munge_ctx_create(), munge_ctx_destroy);
  if (!ctx) return Status::io("MUNGE: out of memory");
  munge_ctx_set(ctx.get(), MUNGE_OPT_UID_RESTRICTION, ::geteuid());
  char* cred = nullptr;
  munge_err_t e = munge_encode(&cred, ctx.get(), payload.data(), static_cast<int>(payload.size()));
  if (e != EMUNGE_SUCCESS) return failure("encode", e, ctx.get());
  credential->assign(cred);
  std::free(cred);
  return Status::OK();
}

Status munge_open(const std::string& credential, std::string* payload, uid_t* uid) {
  Ctx ctx(munge_ctx_create(), munge_ctx_destroy);
  if (!ctx) return Status::io("MUNGE: out of memory");
  void* buf = nullptr;
  int len = 0;
  gid_t gid = 0;
  munge_err_t e = munge_decode(credential.c_str(), ctx.get(), &buf, &len, uid, &gid);
  if (e != EMUNGE_SUCCESS) {
    std::free(buf);
    return failure("decode", e, ctx.get());
  }
  payload->assign(static_cast<const char*>(buf), static_cast<size_t>(len));
  std::free(buf);
  return Status::OK();
}

}  // namespace hydro
