# src/trace/module.mk: builds the LD_PRELOAD tracer $(BUILD)/libscaffold_trace.so with plain gcc
# (no MPI, no OpenMP: it is loaded into arbitrary programs), plus the small C workloads the trace
# tests and the overhead benchmark run under it. Linked only with -ldl -lpthread, libdeflate when
# its header is installed (Debian libdeflate-dev: whole-member gzip, several times zlib's speed)
# and zlib otherwise (TRACE_DEFLATE=0 forces the zlib build).
TRACE_CC      ?= gcc
TRACE_SRCS    := $(wildcard src/trace/*.c)
TRACE_HDRS    := $(wildcard src/trace/*.h) include/scaffold/trace.h include/scaffold/trace_ops.h
TRACE_SO      := $(BUILD)/libscaffold_trace.so
TRACE_WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wvla -Wformat=2
TRACE_CFLAGS  := -std=c11 -D_GNU_SOURCE -O2 -g -fPIC -fvisibility=hidden $(TRACE_WARN) \
                 -Isrc -Iinclude
TRACE_LDFLAGS := -shared -Wl,--no-undefined -Wl,-z,relro -Wl,-z,now
TRACE_DEFLATE ?= $(if $(wildcard /usr/include/libdeflate.h),1,0)
ifeq ($(TRACE_DEFLATE),1)
TRACE_CFLAGS  += -DTRC_HAVE_LIBDEFLATE
TRACE_LIBS    := -ldl -lpthread -ldeflate
else
TRACE_LIBS    := -ldl -lpthread -lz
endif

$(TRACE_SO): $(TRACE_SRCS) $(TRACE_HDRS) src/trace/module.mk
	@mkdir -p $(dir $@)
	$(TRACE_CC) $(TRACE_CFLAGS) $(TRACE_LDFLAGS) $(TRACE_SRCS) -o $@ $(TRACE_LIBS)

# The MPI sibling (src/trace/mpi/wrap_mpi.c, its wrappers generated from the list in
# wrap_mpi.def; see src/trace/mpi_hooks.h): compiled with this build's MPI compiler wrapper for
# mpi.h, linked without libmpi (--as-needed drops it: every PMPI function is looked up at run
# time), so it loads into any process. `scaffold trace` preloads it
# after the tracer. The check below fails the build if a link-time MPI dependency crept in.
TRACE_MPI_SO := $(BUILD)/libscaffold_trace_mpi.so
$(TRACE_MPI_SO): src/trace/mpi/wrap_mpi.c src/trace/mpi/wrap_mpi.def src/trace/mpi_hooks.h \
                 src/trace/module.mk
	@mkdir -p $(dir $@)
	$(MPICC) -std=c11 -D_GNU_SOURCE -O2 -g -fPIC -fvisibility=hidden $(TRACE_WARN) -Isrc \
	    -shared -Wl,--as-needed -Wl,-z,relro $< -o $@ -ldl -lpthread
	@if readelf -d $@ | grep -E 'NEEDED.*lib(mpi|mpich)' >/dev/null; then \
	    echo "$@ must not link libmpi (it resolves PMPI_* at run time)"; rm -f $@; exit 1; fi

# Test workloads (tests/trace/prog_*.c) and the overhead benchmark (bench/trace/ovh_*.c): plain
# gcc programs, so the trace shows only their own I/O (no MPI runtime start-up noise).
TRACE_PROGS := $(patsubst tests/trace/%.c,$(BUILD)/tests/trace/%,$(wildcard tests/trace/prog_*.c)) \
               $(patsubst bench/trace/%.c,$(BUILD)/bench/trace/%,$(wildcard bench/trace/ovh_*.c))

$(BUILD)/tests/trace/prog_%: tests/trace/prog_%.c src/tracehooks/tracehooks.c include/scaffold/trace.h
	@mkdir -p $(dir $@)
	$(TRACE_CC) -std=c11 -D_GNU_SOURCE -O2 -g $(TRACE_WARN) -Iinclude -pthread $< \
	    src/tracehooks/tracehooks.c -o $@

$(BUILD)/bench/trace/ovh_%: bench/trace/ovh_%.c
	@mkdir -p $(dir $@)
	$(TRACE_CC) -std=c11 -D_GNU_SOURCE -O2 -g $(TRACE_WARN) -pthread $< -o $@

# The MPI workload of the MPI tracing tests and benchmark, with this build's MPI.
TRACE_MPI_PROG := $(BUILD)/tests/trace/mpi_calls
$(TRACE_MPI_PROG): tests/trace/mpi_calls.c
	@mkdir -p $(dir $@)
	$(MPICC) -std=c11 -D_GNU_SOURCE -O2 -g $(TRACE_WARN) -pthread $< -o $@

EXTRA_TARGETS += $(TRACE_SO) $(TRACE_MPI_SO) $(TRACE_MPI_PROG) $(TRACE_PROGS)
