# src/analyze/module.mk: the trace analyzer decodes gzip with libdeflate when its header is
# installed (Debian libdeflate-dev: 2-3x faster than zlib's inflate, which dominates trace
# loading), and falls back to zlib streaming otherwise and for truncated members.
ifneq ($(wildcard /usr/include/libdeflate.h),)
MODULE_CFLAGS_analyze := -DAN_HAVE_LIBDEFLATE
LDLIBS += -ldeflate
endif
