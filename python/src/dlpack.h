/*
 * The DLPack ABI (https://github.com/dmlc/dlpack, include/dlpack/dlpack.h),
 * the part feeder's binding exports: written out here because the ABI is a
 * handful of plain structs and Debian ships no dlpack header. Layouts and
 * values follow DLPack 0.8 (DLManagedTensor, capsule "dltensor") and 1.0
 * (DLManagedTensorVersioned, capsule "dltensor_versioned").
 */
#ifndef FEEDER_PY_DLPACK_H
#define FEEDER_PY_DLPACK_H

#include <stdint.h>

#define FPY_DLPACK_MAJOR 1
#define FPY_DLPACK_MINOR 0

typedef enum {
    kDLCPU = 1,
    kDLCUDA = 2,
    kDLCUDAHost = 3,
} DLDeviceType;

typedef struct {
    int32_t device_type; /* DLDeviceType */
    int32_t device_id;
} DLDevice;

typedef enum {
    kDLInt = 0,
    kDLUInt = 1,
    kDLFloat = 2,
    kDLBfloat = 4,
} DLDataTypeCode;

typedef struct {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
} DLDataType;

typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides; /* in elements */
    uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

typedef struct {
    uint32_t major;
    uint32_t minor;
} DLPackVersion;

#define DLPACK_FLAG_BITMASK_READ_ONLY (1ull << 0)

typedef struct DLManagedTensorVersioned {
    DLPackVersion version;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags;
    DLTensor dl_tensor;
} DLManagedTensorVersioned;

#endif /* FEEDER_PY_DLPACK_H */
