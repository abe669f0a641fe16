# src/nn/cuda: the CUDA backend, built only with `make CUDA=1` (without it this file adds
# nothing). Included by the Makefile before its object lists, so that a CUDA build gets its own
# folder (build-cuda, or $(BUILD)-cuda when BUILD is not given on the command line) and a plain
# `make` never links stale CUDA objects. nvcc compiles the kernels (*.cu); the C files, which
# call cudart, cuDNN, cuBLAS and NCCL, go through the ordinary C rule and land in
# libscaffold.a with the rest. -DSCAFFOLD_CUDA tells the C code that the backend is present.
#
# Knobs: CUDA_HOME (/usr/local/cuda), CUDA_ARCH (nvcc -gencode flags: A100 sm_80, H100/H200
# sm_90, plus compute_90 PTX that newer GPUs compile at load time).
ifeq ($(CUDA),1)
CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(CUDA_HOME)/bin/nvcc
CUDA_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
             -gencode arch=compute_90,code=compute_90
ifeq ($(shell command -v $(NVCC) 2>/dev/null),)
$(error CUDA=1: no nvcc at $(NVCC): install the CUDA toolkit, or set CUDA_HOME or NVCC)
endif
ifneq ($(origin BUILD),command line)
BUILD     := $(BUILD)-cuda
endif
CFLAGS    += -DSCAFFOLD_CUDA=1 -isystem $(CUDA_HOME)/include
# cuDNN, cuBLAS and NCCL are not linked: dl.c opens them on first use (through this run path),
# so a CUDA build that never makes a GPU context does not load them.
LDLIBS    += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lstdc++ -ldl
NVCCFLAGS ?= -O3
NVCCFLAGS += -std=c++17 $(CUDA_ARCH) -Isrc -Xcompiler -Wall,-Wextra -MMD -MP

CU_OBJS := $(patsubst src/%.c,$(BUILD)/obj/%.o,$(wildcard src/nn/cuda/*.c)) \
           $(patsubst src/%.cu,$(BUILD)/obj/%.o,$(wildcard src/nn/cuda/*.cu))
# C programs of the backend's tests and benchmark, built with the library (not test_*.c or
# bench_*.c, which every build compiles).
CU_PROGS := $(BUILD)/tests/cuda/cu_host $(BUILD)/tests/gpu/cu_ops $(BUILD)/tests/gpu/cu_unet \
            $(BUILD)/bench/gpu/cu_conv $(BUILD)/bench/gpu/cu_step

.DEFAULT_GOAL := all
all: $(CU_PROGS)
tests-bin: $(CU_PROGS)
benches-bin: $(CU_PROGS)

$(BUILD)/libscaffold.a: $(CU_OBJS)

$(BUILD)/obj/nn/cuda/%.o: src/nn/cuda/%.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MF $(@:.o=.d) -MT $@ -c $< -o $@

-include $(CU_OBJS:.o=.d)
endif
