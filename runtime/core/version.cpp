#include "hydro/version.h"

namespace hydro {

const char* version() { return HYDRO_VERSION; }

}  // namespace hydro
