// backend/registry.cpp — registration, enumeration, backend creation and
// unloading (registry.hpp). Loading from files is in loader.cpp.
#include "tessera/backend/registry.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include <fmt/core.h>
#include <fmt/ranges.h>

#include "backend/abi.hpp"
#include "backend/dynlib.hpp"
#include "backend/names.hpp"
#include "backend/reg_entry.hpp"
#include "backend/registry_internal.hpp"
#include "tessera/core/error.hpp"
#include "tessera/core/printable.hpp"

namespace tessera {

using detail::reg_entry;

namespace detail {

bool read_device_strings(tsr_device * d, const std::string & what, reg_entry::device_rec & rec,
                         std::string & why) {
    const char * dn = plugin_call(what, [&] { return d->iface->get_name(d); });
    // strnlen: a name without its NUL, or of a megabyte, is read no further.
    const std::string_view name(dn ? dn : "", dn ? strnlen(dn, 65) : 0);
    if (name.empty()) {
        why = "has no name";
        return false;
    }
    if (!valid_device_name(name)) {
        why = fmt::format("is named '{}', which is not a device name (1 to 64 printable ASCII characters "
                          "other than space, quote and backslash)",
                          tessera::printable(name, 64));
        return false;
    }
    const char * desc = plugin_call(what, [&] { return d->iface->get_description(d); });
    rec.name = std::string(name);
    rec.description = desc ? std::string(desc, strnlen(desc, reg_entry::max_description)) : std::string();
    return true;
}

std::shared_ptr<reg_entry> make_entry(tsr_reg * reg, const std::string & what,
                                      std::vector<std::string> & skipped) {
    if (auto why = check_reg(reg); !why.empty()) throw error(fmt::format("{}: {}", what, why));
    const char * name = plugin_call(what, [&] { return reg->iface->get_name(reg); });
    if (name == nullptr || name[0] == '\0') throw error(fmt::format("{}: its reg has no name", what));
    if (!valid_backend_name(name)) {
        throw error(fmt::format("{}: its reg's name '{}' is not a backend name (1 to 64 of A-Z a-z "
                                "0-9 _ -)",
                                what, tessera::printable(name, 64)));
    }
    auto e = std::make_shared<reg_entry>();
    e->name = name;
    e->reg = reg;
    const size_t n = plugin_call(what, [&] { return reg->iface->get_device_count(reg); });
    constexpr size_t max_devices = 4096;
    if (n > max_devices) {
        throw error(fmt::format("{}: reports {} devices (more than {}: corrupt)", what, n,
                                max_devices));
    }
    for (size_t i = 0; i < n; ++i) {
        tsr_device * d = plugin_call(what, [&] { return reg->iface->get_device(reg, i); });
        if (d == nullptr) {
            skipped.push_back(fmt::format("{}: device {} is null; skipped", what, i));
            continue;
        }
        if (auto why = check_device(d); !why.empty()) {
            skipped.push_back(fmt::format("{}: device {} skipped: {}", what, i, why));
            continue;
        }
        reg_entry::device_rec rec;
        rec.dev = d;
        std::string why;
        if (!read_device_strings(d, what, rec, why)) {
            skipped.push_back(fmt::format("{}: device {} {}; skipped", what, i, why));
            continue;
        }
        // Every device has a default buffer type (backend.h): one that is
        // unusable would fail `devices` and `run` later, where a variant
        // with it could have hidden a working one.
        tsr_buffer_type * bt = plugin_call(what, [&] { return d->iface->get_buffer_type(d); });
        if (auto why = check_buffer_type(bt); !why.empty()) {
            skipped.push_back(
                fmt::format("{}: device {} skipped: unusable default buffer type: {}", what, i, why));
            continue;
        }
        e->devices.push_back(std::move(rec));
    }
    return e;
}

} // namespace detail

registry::registry()
    : log_([](std::string_view text) { // std::fprintf: a failed write (stderr closed or full) is not an exception
          // (control bytes a message carries from a path or a plugin's text as \xNN)
          std::string msg;
          try {
              msg = tessera::printable_lines(text);
          } catch (...) { // (no memory for the message)
              return;
          }
          std::fprintf(stderr, "tessera: %.*s\n", static_cast<int>(msg.size()), msg.data());
      }) {}

registry::~registry() {
    std::unique_lock lk(mu_);
    auto close = [](reg_entry & e) {
        std::lock_guard elk(e.mu);
        if (e.live[0] + e.live[1] + e.live[2] == 0) {
            e.unloaded.store(true, std::memory_order_release);
            detail::dynlib_close(e.handle);
            e.handle = nullptr;
        } // else: the entry's destructor closes it when its last object goes
    };
    for (auto & e : regs_) close(*e);
    for (auto & d : devs_) {
        if (d.entry->reg == nullptr) close(*d.entry);
    }
}

void registry::set_log(log_fn fn) {
    std::lock_guard lk(log_mu_);
    log_ = std::move(fn);
}

void registry::log(std::string_view msg) const {
    std::lock_guard lk(log_mu_);
    if (!log_ || !logged_.emplace(msg).second) return; // dropped, or said before (set_log: once per registry)
    log_(msg);
}

backend_reg registry::add_entry(std::shared_ptr<reg_entry> e, std::string_view what) {
    std::unique_lock lk(mu_);
    if (e->reg != nullptr) {
        for (const auto & r : regs_) {
            if (detail::iequals(r->name, e->name)) {
                const std::string from = r->path.empty() ? "compiled in" : "from " + tessera::printable_utf8(r->path);
                throw error(fmt::format("{}: a backend named '{}' is already registered ({})", what,
                                        e->name, from));
            }
        }
    }
    // Device names are unique across the registry; a later duplicate is
    // skipped, with the library that has the name. A library left without
    // devices is refused (load_best then tries the next variant): it would
    // only take its family's place without a device to use.
    std::vector<reg_entry::device_rec> kept;
    std::vector<std::string> clashes;
    for (auto & rec : e->devices) {
        std::string owner;
        for (const auto & s : devs_) {
            if (detail::iequals(s.entry->find(s.dev)->name, rec.name)) owner = "by " + s.entry->describe();
        }
        for (const auto & k : kept) {
            if (owner.empty() && detail::iequals(k.name, rec.name)) owner = "by another of its devices";
        }
        if (!owner.empty()) {
            const std::string clash = fmt::format("a device named '{}' is already registered {}", rec.name, owner);
            if (e->reg == nullptr) throw error(fmt::format("{}: {}", what, clash));
            clashes.push_back(clash);
            continue;
        }
        kept.push_back(std::move(rec));
    }
    if (kept.empty() && !clashes.empty()) {
        throw error(fmt::format("{}: none of its {} devices can be registered: {}{}", what, clashes.size(),
                                clashes.front(),
                                clashes.size() > 1 ? fmt::format(" (and {} more)", clashes.size() - 1) : ""));
    }
    if (!clashes.empty()) {
        lk.unlock();
        for (const auto & c : clashes) log(fmt::format("{}: {}; skipped", what, c));
        lk.lock();
    }
    e->devices = std::move(kept);
    if (e->reg != nullptr) regs_.push_back(e);
    for (const auto & rec : e->devices) devs_.push_back({rec.dev, e});
    return backend_reg(std::move(e));
}

backend_reg registry::register_backend(tsr_reg * reg) {
    std::lock_guard load_lk(load_mu_);
    std::vector<std::string> skipped;
    const char * nm = detail::plugin_call("register_backend", [&] {
        return (reg && reg->iface && reg->iface->get_name) ? reg->iface->get_name(reg) : "";
    });
    const std::string what = fmt::format("backend '{}'", tessera::printable(detail::str_or_empty(nm), 64));
    auto e = detail::make_entry(reg, what, skipped);
    for (const auto & s : skipped) log(s);
    return add_entry(std::move(e), what);
}

device registry::register_device(tsr_device * dev) {
    std::lock_guard load_lk(load_mu_);
    if (auto why = detail::check_device(dev); !why.empty()) {
        throw error(fmt::format("register_device: {}", why));
    }
    reg_entry::device_rec rec;
    rec.dev = dev;
    if (std::string why; !detail::read_device_strings(dev, "register_device", rec, why)) {
        throw error(fmt::format("register_device: the device {}", why));
    }
    tsr_buffer_type * bt = detail::plugin_call("register_device", [&] { return dev->iface->get_buffer_type(dev); });
    if (auto why = detail::check_buffer_type(bt); !why.empty()) {
        throw error(fmt::format("register_device: unusable default buffer type: {}", why));
    }
    auto e = std::make_shared<reg_entry>();
    e->name = rec.name;
    const std::string what = fmt::format("device '{}'", rec.name);
    e->devices.push_back(std::move(rec));
    add_entry(e, what);
    return device(dev, e);
}

void registry::unload(const backend_reg & reg) {
    std::lock_guard load_lk(load_mu_);
    std::shared_ptr<reg_entry> e;
    {
        std::unique_lock lk(mu_);
        auto it = std::find(regs_.begin(), regs_.end(), reg.entry());
        if (!reg || it == regs_.end()) {
            throw error(fmt::format("unload: {} is not registered here",
                                    reg ? reg.entry()->describe() : "an empty reg handle"));
        }
        e = *it;
        {
            std::lock_guard elk(e->mu);
            const int nb = e->live[0], nbuf = e->live[1], nother = e->live[2];
            if (nb + nbuf + nother > 0) {
                throw error(fmt::format("cannot unload {}: {} backend(s), {} buffer(s) and {} "
                                        "other object(s) made by it are still alive; free them "
                                        "first",
                                        e->describe(), nb, nbuf, nother));
            }
            e->unloaded.store(true, std::memory_order_release);
        }
        regs_.erase(it);
        std::erase_if(devs_, [&](const dev_slot & s) { return s.entry == e; });
    }
    detail::dynlib_close(e->handle);
    e->handle = nullptr;
}

// ----------------------------------------------------------------- enumeration

size_t registry::reg_count() const {
    std::shared_lock lk(mu_);
    return regs_.size();
}

backend_reg registry::reg_at(size_t i) const {
    std::shared_lock lk(mu_);
    if (i >= regs_.size()) {
        throw error(fmt::format("backend index {} out of range ({} registered)", i, regs_.size()));
    }
    return backend_reg(regs_[i]);
}

std::vector<backend_reg> registry::regs() const {
    std::shared_lock lk(mu_);
    std::vector<backend_reg> out;
    for (const auto & e : regs_) out.emplace_back(e);
    return out;
}

std::optional<backend_reg> registry::find_reg(std::string_view name) const {
    std::shared_lock lk(mu_);
    for (const auto & e : regs_) {
        if (detail::iequals(e->name, name)) return backend_reg(e);
    }
    return std::nullopt;
}

size_t registry::device_count() const {
    std::shared_lock lk(mu_);
    return devs_.size();
}

device registry::device_at(size_t i) const {
    std::shared_lock lk(mu_);
    if (i >= devs_.size()) {
        throw error(fmt::format("device index {} out of range ({} registered)", i, devs_.size()));
    }
    return device(devs_[i].dev, devs_[i].entry);
}

std::vector<device> registry::devices() const {
    std::shared_lock lk(mu_);
    std::vector<device> out;
    for (const auto & s : devs_) out.emplace_back(s.dev, s.entry);
    return out;
}

std::optional<device> registry::find_device(std::string_view name) const {
    std::shared_lock lk(mu_);
    for (const auto & s : devs_) {
        if (detail::iequals(s.entry->find(s.dev)->name, name)) return device(s.dev, s.entry);
    }
    return std::nullopt;
}

std::optional<device> registry::find_device(tsr_device_type type) const {
    std::shared_lock lk(mu_);
    for (const auto & s : devs_) {
        const device d(s.dev, s.entry);
        if (d.type() == type) return d;
    }
    return std::nullopt;
}

// -------------------------------------------------------------------- backends

static std::string device_list(const std::vector<device> & devs) {
    if (devs.empty()) return "no devices are registered";
    std::string s = "devices:";
    for (const auto & d : devs) s += fmt::format(" {} ({})", d.name(), device_type_name(d.type()));
    return s;
}

backend registry::init_by_name(std::string_view name, std::string_view params) const {
    auto d = find_device(name);
    if (!d) throw error(fmt::format("no device named '{}' ({})", name, device_list(devices())));
    return d->init(params);
}

backend registry::init_by_type(tsr_device_type type, std::string_view params) const {
    auto d = find_device(type);
    if (!d) {
        throw error(fmt::format("no device of type {} ({})", device_type_name(type),
                                device_list(devices())));
    }
    return d->init(params);
}

std::optional<device> pick_best_device(const std::vector<device> & devs) {
    for (tsr_device_type t : {TSR_DEVICE_TYPE_GPU, TSR_DEVICE_TYPE_IGPU, TSR_DEVICE_TYPE_CPU}) {
        for (const auto & d : devs) {
            if (d.type() == t) return d;
        }
    }
    return std::nullopt;
}

std::optional<device> registry::best_device() const { return pick_best_device(devices()); }

backend registry::init_best(std::string_view params) const {
    auto d = best_device();
    if (!d) {
        // (Where load_all looks, the missing install folders included: an
        // embedding program that called it sees why nothing was found.)
        const std::vector<std::string> dirs = searched_folders();
        throw error(fmt::format("no GPU, integrated GPU or CPU device is available ({}; load_all looks for backend "
                                "plugins in: {}; TESSERA_BACKEND_PATH or load_all(dir) name another folder)",
                                device_list(devices()),
                                dirs.empty() ? std::string("no existing folder") : fmt::format("{}", fmt::join(dirs, ", "))));
    }
    return d->init(params);
}

} // namespace tessera
