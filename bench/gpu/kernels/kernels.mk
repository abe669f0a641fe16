# bench/gpu/kernels: the per-kernel check-and-time programs (kh.h), one per own CUDA kernel of
# src/nn/cuda. Built in every build: their CPU-reference half runs on any machine (tests/cuda
# runs `run.sh --cpu-only --quick`); a CUDA build adds the GPU half and links the candidate
# kernel versions (versions.cu, compiled by nvcc).
KH_SRCS := $(wildcard bench/gpu/kernels/*.c)
KH_BINS := $(patsubst bench/%.c,$(BUILD)/bench/%,$(KH_SRCS))
KH_VOBJ :=
ifeq ($(CUDA),1)
KH_VOBJ := $(BUILD)/bench/gpu/kernels/versions.o
$(KH_VOBJ): bench/gpu/kernels/versions.cu
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MF $(@:.o=.d) -MT $@ -c $< -o $@
-include $(KH_VOBJ:.o=.d)
endif

all: $(KH_BINS)
tests-bin: $(KH_BINS)
benches-bin: $(KH_BINS)

$(KH_BINS): $(BUILD)/bench/gpu/kernels/%: bench/gpu/kernels/%.c bench/gpu/kernels/kh.h \
            bench/gpu/kernels/kv.h $(LIB) $(KH_VOBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(KH_VOBJ) $(LIB) $(LDFLAGS) $(LDLIBS) -o $@
