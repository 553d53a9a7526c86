// backend/backend_reg.cpp — backend family handles (backend_reg.hpp).
#include "tessera/backend/backend_reg.hpp"

#include "backend/abi.hpp"
#include "backend/plugin_call.hpp"
#include "backend/reg_entry.hpp"
#include "tessera/core/error.hpp"

namespace tessera {

backend_reg::backend_reg(std::shared_ptr<detail::reg_entry> entry) : entry_(std::move(entry)) {}

static const detail::reg_entry & need(const std::shared_ptr<detail::reg_entry> & e) {
    if (!e) throw error("backend_reg: use of an empty reg handle");
    return *e;
}

tsr_reg * backend_reg::get() const {
    const detail::reg_entry & e = need(entry_);
    detail::check_loaded(&e); // the table lived in the unloaded library
    return e.reg;
}

const char * backend_reg::name() const { return need(entry_).name.c_str(); }

api_version backend_reg::version() const {
    const detail::reg_entry & e = need(entry_);
    detail::check_loaded(&e);
    const tsr_reg * r = e.reg;
    if (r == nullptr) return {};
    return {r->api_major, r->api_minor};
}

const std::string & backend_reg::path() const { return need(entry_).path; }

int backend_reg::score() const { return need(entry_).score; }

std::vector<device> backend_reg::devices() const {
    const detail::reg_entry & e = need(entry_);
    detail::check_loaded(&e);
    std::vector<device> out;
    out.reserve(e.devices.size());
    for (const auto & rec : e.devices) out.emplace_back(rec.dev, entry_);
    return out;
}

void * backend_reg::proc_address(const char * name) const {
    const detail::reg_entry & e = need(entry_);
    detail::check_loaded(&e);
    return detail::reg_proc(e.reg, name, &e);
}

std::vector<std::pair<std::string, std::string>> backend_reg::features() const {
    std::vector<std::pair<std::string, std::string>> out;
    auto fn = proc<tsr_reg_get_features_fn>(TSR_EXT_REG_GET_FEATURES);
    if (fn == nullptr) return out;
    const detail::reg_entry & e = need(entry_);
    const tsr_feature * f = detail::guarded_or({&e}, TSR_EXT_REG_GET_FEATURES,
                                               static_cast<const tsr_feature *>(nullptr), [&] { return fn(e.reg); });
    for (size_t k = 0; f != nullptr && f[k].name != nullptr && k < 4096; ++k) {
        out.emplace_back(f[k].name, detail::str_or_empty(f[k].value));
    }
    return out;
}

} // namespace tessera
