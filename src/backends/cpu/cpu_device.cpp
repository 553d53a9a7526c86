// backends/cpu/cpu_device.cpp — the CPU device and the "cpu" reg behind the
// C tables: name, description (/proc/cpuinfo), memory (/proc/meminfo),
// capabilities, supports_op/supports_buft, extension lookup and the
// feature list.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "backends/cpu/compute.hpp"
#include "backends/cpu/cpu_adapter.hpp"
#include "backends/cpu/features.hpp"
#include "backends/cpu/ops/mul_mat_impl.hpp"
#include "backends/cpu/ops/mul_mat_repack.hpp"
#include "backends/cpu/ops/tuning.hpp"
#include "tessera/backend/cpu.hpp"

namespace tessera::cpu {

namespace {

// The processor's model name from /proc/cpuinfo ("model name" on x86,
// "Hardware"/"Processor" on some Arm kernels); computed once.
const std::string & model_name() {
    static const std::string name = [] {
        std::string found;
        if (FILE * f = std::fopen("/proc/cpuinfo", "r")) {
            char line[512];
            while (std::fgets(line, sizeof line, f)) {
                const char * keys[] = {"model name", "Hardware", "Processor"};
                for (const char * k : keys) {
                    if (found.empty() && std::strncmp(line, k, std::strlen(k)) == 0) {
                        const char * colon = std::strchr(line, ':');
                        if (colon == nullptr) continue;
                        std::string v(colon + 1);
                        const size_t b = v.find_first_not_of(" \t");
                        const size_t e = v.find_last_not_of(" \t\r\n");
                        if (b != std::string::npos) found = v.substr(b, e - b + 1);
                    }
                }
                if (!found.empty()) break;
            }
            std::fclose(f);
        }
        return found.empty() ? std::string("unknown processor") : found;
    }();
    return name;
}

// Bytes of MemAvailable/MemTotal from /proc/meminfo, or sysconf pages.
void memory_info(size_t * free_bytes, size_t * total_bytes) {
    unsigned long long avail_kb = 0, total_kb = 0;
    if (FILE * f = std::fopen("/proc/meminfo", "r")) {
        char line[256];
        while (std::fgets(line, sizeof line, f)) {
            std::sscanf(line, "MemTotal: %llu kB", &total_kb);
            std::sscanf(line, "MemAvailable: %llu kB", &avail_kb);
        }
        std::fclose(f);
    }
    const long page = sysconf(_SC_PAGESIZE);
    if (total_kb == 0 && page > 0) total_kb = (unsigned long long)sysconf(_SC_PHYS_PAGES) * page / 1024;
    if (avail_kb == 0 && page > 0) avail_kb = (unsigned long long)sysconf(_SC_AVPHYS_PAGES) * page / 1024;
    *free_bytes = size_t(avail_kb) * 1024;
    *total_bytes = size_t(total_kb) * 1024;
}

// ---- device table ----

const char * dev_name(tsr_device *) { return "CPU"; }
const char * dev_description(tsr_device *) { return model_name().c_str(); }
void dev_memory(tsr_device *, size_t * free_b, size_t * total_b) { memory_info(free_b, total_b); }
int32_t dev_type(tsr_device *) { return TSR_DEVICE_TYPE_CPU; }
uint32_t dev_caps(tsr_device *) { return TSR_DEVICE_CAP_BUFFER_FROM_HOST_PTR; }
tsr_backend * dev_init(tsr_device * d, const char * params) {
    (void)tuning(); // a bad tuning variable is reported now, on stderr, not in the middle of the first compute
    return backend_new(d, params);
}
tsr_buffer_type * dev_buffer_type(tsr_device *) { return host_buffer_type(); }

// Host memory, or the CPU_REPACK type (whose repacked tensors the kernels
// accept only as MUL_MAT src[0]: cpu::supports_op checks that).
bool cpu_memory(tsr_buffer_type * bt) { return bt == repack_buffer_type() || is_host_buffer_type(bt); }

// The kernels' answer, and every buffer involved must be CPU memory.
bool dev_supports_op(tsr_device *, const tsr_tensor * op) {
    if (op == nullptr || !cpu::supports_op(op)) return false;
    if (op->buffer != nullptr && !cpu_memory(op->buffer->buft)) return false;
    for (const tsr_tensor * s : op->src) {
        if (s != nullptr && s->buffer != nullptr && !cpu_memory(s->buffer->buft)) {
            return false;
        }
    }
    return true;
}

bool dev_supports_buft(tsr_device *, tsr_buffer_type * bt) { return cpu_memory(bt); }

tsr_buffer * dev_from_host_ptr(tsr_device *, void * ptr, size_t size, size_t) {
    return buffer_from_host_ptr(ptr, size);
}

constexpr tsr_device_i device_iface = {
    .size = sizeof(tsr_device_i),
    .get_name = dev_name,
    .get_description = dev_description,
    .get_memory = dev_memory,
    .get_type = dev_type,
    .get_caps = dev_caps,
    .init_backend = dev_init,
    .get_buffer_type = dev_buffer_type,
    .supports_op = dev_supports_op,
    .supports_buft = dev_supports_buft,
    .get_host_buffer_type = nullptr, // the default type is host memory already
    .buffer_from_host_ptr = dev_from_host_ptr,
    .offload_op = nullptr,
};

// ---- reg table ----

extern tsr_reg cpu_reg_object;

const char * reg_name(tsr_reg *) { return "cpu"; }
size_t reg_device_count(tsr_reg *) { return 1; }

} // namespace

tsr_device cpu_device_object = {&device_iface, &cpu_reg_object, nullptr};

namespace {

tsr_device * reg_device(tsr_reg *, size_t i) { return i == 0 ? &cpu_device_object : nullptr; }

// (name, value) pairs: each feature, "1" when this processor has it and
// this build's code uses it; then the variant, the processor's family and
// model, the mat-vec kernels' software prefetch distance, whether the
// prompt GEMMs of repacked weights run on AMX tiles, the huge-page advice for weights and
// the threading.
const tsr_feature * reg_features(tsr_reg *) {
    static std::vector<std::string> storage;
    static std::vector<tsr_feature> list;
    static std::once_flag once;
    std::call_once(once, [] {
        const uint32_t have = detect_features() & build_isa_features();
#if defined(__aarch64__)
        const uint32_t shown[] = {FEAT_NEON, FEAT_ARM_FMA, FEAT_FP16_VA, FEAT_DOTPROD,
                                  FEAT_MATMUL_INT8, FEAT_SVE, FEAT_SME};
#else
        const uint32_t shown[] = {FEAT_SSE3, FEAT_SSSE3, FEAT_AVX, FEAT_AVX_VNNI, FEAT_AVX2,
                                  FEAT_F16C, FEAT_FMA, FEAT_BMI2, FEAT_AVX512F,
                                  FEAT_AVX512_VBMI, FEAT_AVX512_VNNI, FEAT_AVX512_BF16,
                                  FEAT_AMX_INT8, FEAT_AMX_BF16};
#endif
        for (uint32_t b : shown) {
            storage.emplace_back(feature_name(b));
            storage.emplace_back((have & b) ? "1" : "0");
        }
        if (const int vl = sve_vector_bytes(); vl > 0) {
            storage.emplace_back("SVE_CNT");
            storage.emplace_back(std::to_string(vl));
        }
        storage.emplace_back("VARIANT");
        storage.emplace_back(build_variant_name());
        const cpu_model m = detect_cpu_model(); // ops/tuning.hpp: the CPUID display values, hex
        char hex[16];
        std::snprintf(hex, sizeof hex, "0x%x", m.family);
        storage.emplace_back("CPU_FAMILY");
        storage.emplace_back(hex);
        std::snprintf(hex, sizeof hex, "0x%x", m.model);
        storage.emplace_back("CPU_MODEL");
        storage.emplace_back(hex);
        storage.emplace_back("STREAM_PREFETCH"); // ops/tuning.hpp: bytes, 0 = none
        storage.emplace_back(std::to_string(tuning().stream_prefetch));
        storage.emplace_back("STREAM_PREFETCH_L2"); // ops/tuning.hpp: those prefetches into L2, not L1
        storage.emplace_back(tuning().stream_prefetch_l2 ? "1" : "0");
        storage.emplace_back("STREAM_PREFETCH_L2_ABOVE"); // ops/tuning.hpp: only for more repacked weight bytes than this (0: any)
        storage.emplace_back(std::to_string(tuning().stream_prefetch_l2_above));
        storage.emplace_back("AMX_GEMM"); // ops/mul_mat_repack.hpp: the repacked prompt GEMMs (quantized, F16) on AMX tiles
        storage.emplace_back(mul_mat_repack_uses_amx() ? "1" : "0");
        storage.emplace_back("GEMM_F32_ROWS"); // ops/mul_mat_impl.hpp: F32 row-major GEMMs with the weights broadcast
        storage.emplace_back(gemm_f32_rows_enabled() ? "1" : "0");
        storage.emplace_back("HUGE_PAGES"); // ops/tuning.hpp: weight buffers advised onto huge pages
        storage.emplace_back(huge_page_advice() ? "1" : "0");
        storage.emplace_back("OPENMP");
        storage.emplace_back("0");
        storage.emplace_back("THREAD_POOL");
        storage.emplace_back("1");
        for (size_t i = 0; i + 1 < storage.size(); i += 2) {
            list.push_back({storage[i].c_str(), storage[i + 1].c_str()});
        }
        list.push_back({nullptr, nullptr});
    });
    return list.data();
}

tsr_buffer_type ** dev_extra_bufts(tsr_device *) {
    static tsr_buffer_type * list[] = {repack_buffer_type(), nullptr};
    return list;
}

void * reg_proc(tsr_reg *, const char * name) {
    if (name == nullptr) return nullptr;
    if (std::strcmp(name, TSR_EXT_REG_GET_FEATURES) == 0) {
        return reinterpret_cast<void *>(reg_features);
    }
    if (std::strcmp(name, TSR_EXT_DEV_GET_EXTRA_BUFTS) == 0) {
        return reinterpret_cast<void *>(dev_extra_bufts);
    }
    return backend_proc_address(name);
}

constexpr tsr_reg_i reg_iface = {
    .size = sizeof(tsr_reg_i),
    .get_name = reg_name,
    .get_device_count = reg_device_count,
    .get_device = reg_device,
    .get_proc_address = reg_proc,
};

tsr_reg cpu_reg_object = {TSR_BACKEND_API_MAJOR, TSR_BACKEND_API_MINOR, &reg_iface, nullptr};

} // namespace

tsr_reg * backend_reg() { return &cpu_reg_object; }

} // namespace tessera::cpu
