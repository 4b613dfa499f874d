#pragma once
#include "core/model/trace.h"

#include <string>

namespace poolscope {

// `poolscope info`: what the file is, before any classification (format, version hints, devices,
// entries, time span, the loader's warnings), as text and as JSON.
std::string infoText(const Trace& trace);
std::string infoJsonText(const Trace& trace);

} // namespace poolscope
