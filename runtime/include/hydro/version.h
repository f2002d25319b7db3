// hydro's version: the one in CMakeLists.txt's project(), compiled into the core. hydro-launch,
// hydroctl, the plugin, the Python package and each checkpoint's manifest all report this one.
#pragma once

namespace hydro {

const char* version();

}  // namespace hydro
