/* dl: cuDNN, cuBLAS and NCCL loaded on first use instead of at program start.
 *
 * Why: linked the ordinary way, the dynamic loader maps and relocates these libraries, and runs
 * their static initialisers (cuBLASLt registers its kernel images with the CUDA runtime), in
 * every process of a CUDA build, whether it ever touches a GPU or not: about 200 MiB of resident
 * memory before main() in a CUDA 13 / cuDNN 9 build, and on every rank of a CPU run of it. The
 * CUDA build is not linked with them (module.mk keeps only the small CUDA runtime): each function
 * the backend calls is defined here, with the prototype of the library's own header (so the
 * compiler checks every signature), and forwards to the library's symbol, which the first call
 * opens with dlopen (by its soname, found through the executable's run path as the link would
 * have) and resolves with dlsym. A process that never makes a CUDA context never loads them.
 *
 * A library that cannot be opened makes every stub of it return that library's "not
 * initialised" status (NCCL: ncclSystemError), and its error-string function return why; the
 * error helpers (device.c, comm.c) name the library and the fix (cu_dl_error). */
#include "nn/cuda/cu_int.h"

#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define STR_(x) #x
#define STR(x) STR_(x)

typedef struct dl_lib {
    const char *soname;
    const char *what; /* for messages */
    void *h;
    int tried;
    char err[512];
} dl_lib;

static dl_lib libs[CU_DL_NLIBS] = {
    {"libcudnn.so." STR(CUDNN_MAJOR), "cuDNN " STR(CUDNN_MAJOR), NULL, 0, ""},
    {"libcublas.so." STR(CUBLAS_VER_MAJOR), "cuBLAS " STR(CUBLAS_VER_MAJOR), NULL, 0, ""},
    {"libnccl.so." STR(NCCL_MAJOR), "NCCL " STR(NCCL_MAJOR), NULL, 0, ""},
};
static pthread_mutex_t dl_mutex = PTHREAD_MUTEX_INITIALIZER;

/* The library's handle, opened on the first call; NULL (with l->err) when it cannot be. */
static void *lib_open(dl_lib *l) {
    if (!l->tried) {
        l->tried = 1;
        l->h = dlopen(l->soname, RTLD_NOW | RTLD_LOCAL);
        if (!l->h) {
            const char *e = dlerror();
            snprintf(l->err, sizeof l->err,
                     "%s could not be loaded (%s): install %s (the CUDA toolkit's libraries) or "
                     "put its folder on LD_LIBRARY_PATH",
                     l->soname, e ? e : "dlopen failed", l->what);
        }
    }
    return l->h;
}

/* The address of `name` in library `lib`, resolved once into *cache. */
static void *resolve(int lib, const char *name, void **cache) {
    void *p = __atomic_load_n(cache, __ATOMIC_ACQUIRE);
    if (p)
        return p;
    pthread_mutex_lock(&dl_mutex);
    dl_lib *l = &libs[lib];
    void *h = lib_open(l);
    if (h) {
        p = dlsym(h, name);
        if (!p)
            snprintf(l->err, sizeof l->err, "%s has no symbol %s: the library is older than the "
                                            "headers the backend was built with",
                     l->soname, name);
        else
            __atomic_store_n(cache, p, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&dl_mutex);
    return p;
}

const char *cu_dl_error(int lib) {
    if (lib < 0 || lib >= CU_DL_NLIBS)
        return NULL;
    pthread_mutex_lock(&dl_mutex);
    const char *e = libs[lib].err[0] ? libs[lib].err : NULL;
    pthread_mutex_unlock(&dl_mutex);
    return e;
}

int cu_dl_loaded(int lib) {
    if (lib < 0 || lib >= CU_DL_NLIBS)
        return 0;
    pthread_mutex_lock(&dl_mutex);
    const int r = libs[lib].h != NULL;
    pthread_mutex_unlock(&dl_mutex);
    return r;
}

void cu_dl_use_soname(int lib, const char *soname) {
    static const char *const defaults[CU_DL_NLIBS] = {
        "libcudnn.so." STR(CUDNN_MAJOR), "libcublas.so." STR(CUBLAS_VER_MAJOR),
        "libnccl.so." STR(NCCL_MAJOR)};
    if (lib < 0 || lib >= CU_DL_NLIBS)
        return;
    pthread_mutex_lock(&dl_mutex);
    libs[lib].soname = soname ? soname : defaults[lib];
    libs[lib].tried = 0;
    libs[lib].h = NULL; /* a loaded library stays mapped; only the next opens change */
    libs[lib].err[0] = '\0';
    pthread_mutex_unlock(&dl_mutex);
}

/* One forwarding definition: RET NAME PARAMS { return real NAME ARGS, or FAIL }. The cache is
 * per function; a stub resolved once never takes the lock again. */
#define STUB(LIB, RET, FAIL, NAME, PARAMS, ARGS)                                                   \
    RET NAME PARAMS {                                                                              \
        static void *fn;                                                                           \
        typedef RET(*fn_t) PARAMS;                                                                 \
        void *p = resolve(LIB, #NAME, &fn);                                                        \
        if (!p)                                                                                    \
            return FAIL;                                                                           \
        return ((fn_t)p)ARGS;                                                                      \
    }

/* ---- cuDNN ----------------------------------------------------------------------------------- */
#define DNN_FAIL CUDNN_STATUS_NOT_INITIALIZED
STUB(CU_DL_CUDNN, cudnnStatus_t, DNN_FAIL, cudnnCreate, (cudnnHandle_t * handle), (handle))
STUB(CU_DL_CUDNN, cudnnStatus_t, DNN_FAIL, cudnnDestroy, (cudnnHandle_t handle), (handle))
STUB(CU_DL_CUDNN, cudnnStatus_t, DNN_FAIL, cudnnSetStream,
     (cudnnHandle_t handle, cudaStream_t streamId), (handle, streamId))
STUB(CU_DL_CUDNN, cudnnStatus_t, DNN_FAIL, cudnnCreateTensorDescriptor,
     (cudnnTensorDescriptor_t * tensorDesc), (tensorDesc))
STUB(CU_DL_CUDNN, cudnnStatus_t, DNN_FAIL, cudnnDestroyTensorDescriptor,
     (cudnnTensorDescriptor_t tensorDesc), (tensorDesc))
STUB(CU_DL_CUDNN, cudnnStatus_t, DNN_FAIL, cudnnSetTensorNdDescriptorEx,
     (cudnnTensorDescriptor_t tensorDesc, cudnnTensorFormat_t format, cudnnDataType_t dataType,
      int nbDims, const int dimA[]),
     (tensorDesc, format, dataType, nbDims, dimA))
STUB(CU_DL_CUDNN, cudnnStatus_t, DNN_FAIL, cudnnCreateFilterDescriptor,
     (cudnnFilterDescriptor_t * filterDesc), (filterDesc))
STUB(CU_DL_CUDNN, cudnnStatus_t, DNN_FAIL, cudnnDestroyFilterDescriptor,
     (cudnnFilterDescriptor_t filterDesc), (filterDesc))
STUB(CU_DL_CUDNN, cudnnStatus_t, DNN_FAIL, cudnnSetFilterNdDescriptor,
     (cudnnFilterDescriptor_t filterDesc, cudnnDataType_t dataType, cudnnTensorFormat_t format,
      int nbDims, const int filterDimA[]),
     (filterDesc, dataType, format, nbDims, filterDimA))
STUB(CU_DL_CUDNN, cudnnStatus_t, DNN_FAIL, cudnnCreateConvolutionDescriptor,
     (cudnnConvolutionDescriptor_t * convDesc), (convDesc))
STUB(CU_DL_CUDNN, cudnnStatus_t, DNN_FAIL, cudnnDestroyConvolutionDescriptor,
     (cudnnConvolutionDescriptor_t convDesc), (convDesc))
STUB(CU_DL_CUDNN, cudnnStatus_t, DNN_FAIL, cudnnSetConvolutionNdDescriptor,
     (cudnnConvolutionDescriptor_t convDesc, int arrayLength, const int padA[],
      const int filterStrideA[], const int dilationA[], cudnnConvolutionMode_t mode,
      cudnnDataType_t computeType),
     (convDesc, arrayLength, padA, filterStrideA, dilationA, mode, computeType))
STUB(CU_DL_CUDNN, cudnnStatus_t, DNN_FAIL, cudnnSetConvolutionMathType,
     (cudnnConvolutionDescriptor_t convDesc, cudnnMathType_t mathType), (convDesc, mathType))
STUB(CU_DL_CUDNN, cudnnStatus_t, DNN_FAIL, cudnnGetConvolutionNdForwardOutputDim,
     (const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t inputTensorDesc,
      const cudnnFilterDescriptor_t filterDesc, int nbDims, int tensorOuputDimA[]),
     (convDesc, inputTensorDesc, filterDesc, nbDims, tensorOuputDimA))
STUB(CU_DL_CUDNN, cudnnStatus_t, DNN_FAIL, cudnnFindConvolutionForwardAlgorithmEx,
     (cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const void *x,
      const cudnnFilterDescriptor_t wDesc, const void *w,
      const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t yDesc, void *y,
      const int requestedAlgoCount, int *returnedAlgoCount,
      cudnnConvolutionFwdAlgoPerf_t *perfResults, void *workSpace, size_t workSpaceSizeInBytes),
     (handle, xDesc, x, wDesc, w, convDesc, yDesc, y, requestedAlgoCount, returnedAlgoCount,
      perfResults, workSpace, workSpaceSizeInBytes))
STUB(CU_DL_CUDNN, cudnnStatus_t, DNN_FAIL, cudnnFindConvolutionBackwardDataAlgorithmEx,
     (cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc, const void *w,
      const cudnnTensorDescriptor_t dyDesc, const void *dy,
      const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t dxDesc, void *dx,
      const int requestedAlgoCount, int *returnedAlgoCount,
      cudnnConvolutionBwdDataAlgoPerf_t *perfResults, void *workSpace,
      size_t workSpaceSizeInBytes),
     (handle, wDesc, w, dyDesc, dy, convDesc, dxDesc, dx, requestedAlgoCount, returnedAlgoCount,
      perfResults, workSpace, workSpaceSizeInBytes))
STUB(CU_DL_CUDNN, cudnnStatus_t, DNN_FAIL, cudnnFindConvolutionBackwardFilterAlgorithmEx,
     (cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc, const void *x,
      const cudnnTensorDescriptor_t dyDesc, const void *y,
      const cudnnConvolutionDescriptor_t convDesc, const cudnnFilterDescriptor_t dwDesc,
      void *dw, const int requestedAlgoCount, int *returnedAlgoCount,
      cudnnConvolutionBwdFilterAlgoPerf_t *perfResults, void *workSpace,
      size_t workSpaceSizeInBytes),
     (handle, xDesc, x, dyDesc, y, convDesc, dwDesc, dw, requestedAlgoCount, returnedAlgoCount,
      perfResults, workSpace, workSpaceSizeInBytes))
STUB(CU_DL_CUDNN, cudnnStatus_t, DNN_FAIL, cudnnConvolutionForward,
     (cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xDesc, const void *x,
      const cudnnFilterDescriptor_t wDesc, const void *w,
      const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionFwdAlgo_t algo,
      void *workSpace, size_t workSpaceSizeInBytes, const void *beta,
      const cudnnTensorDescriptor_t yDesc, void *y),
     (handle, alpha, xDesc, x, wDesc, w, convDesc, algo, workSpace, workSpaceSizeInBytes, beta,
      yDesc, y))
STUB(CU_DL_CUDNN, cudnnStatus_t, DNN_FAIL, cudnnConvolutionBackwardData,
     (cudnnHandle_t handle, const void *alpha, const cudnnFilterDescriptor_t wDesc, const void *w,
      const cudnnTensorDescriptor_t dyDesc, const void *dy,
      const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionBwdDataAlgo_t algo,
      void *workSpace, size_t workSpaceSizeInBytes, const void *beta,
      const cudnnTensorDescriptor_t dxDesc, void *dx),
     (handle, alpha, wDesc, w, dyDesc, dy, convDesc, algo, workSpace, workSpaceSizeInBytes, beta,
      dxDesc, dx))
STUB(CU_DL_CUDNN, cudnnStatus_t, DNN_FAIL, cudnnConvolutionBackwardFilter,
     (cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xDesc, const void *x,
      const cudnnTensorDescriptor_t dyDesc, const void *dy,
      const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionBwdFilterAlgo_t algo,
      void *workSpace, size_t workSpaceSizeInBytes, const void *beta,
      const cudnnFilterDescriptor_t dwDesc, void *dw),
     (handle, alpha, xDesc, x, dyDesc, dy, convDesc, algo, workSpace, workSpaceSizeInBytes, beta,
      dwDesc, dw))

const char *cudnnGetErrorString(cudnnStatus_t status) {
    static void *fn;
    typedef const char *(*fn_t)(cudnnStatus_t);
    void *p = resolve(CU_DL_CUDNN, "cudnnGetErrorString", &fn);
    return p ? ((fn_t)p)(status) : cu_dl_error(CU_DL_CUDNN);
}

/* ---- cuBLAS ---------------------------------------------------------------------------------- */
#define BLAS_FAIL CUBLAS_STATUS_NOT_INITIALIZED
STUB(CU_DL_CUBLAS, cublasStatus_t, BLAS_FAIL, cublasCreate_v2, (cublasHandle_t * handle),
     (handle))
STUB(CU_DL_CUBLAS, cublasStatus_t, BLAS_FAIL, cublasDestroy_v2, (cublasHandle_t handle),
     (handle))
STUB(CU_DL_CUBLAS, cublasStatus_t, BLAS_FAIL, cublasSetStream_v2,
     (cublasHandle_t handle, cudaStream_t streamId), (handle, streamId))
STUB(CU_DL_CUBLAS, cublasStatus_t, BLAS_FAIL, cublasSetMathMode,
     (cublasHandle_t handle, cublasMath_t mode), (handle, mode))
STUB(CU_DL_CUBLAS, cublasStatus_t, BLAS_FAIL, cublasGemmEx,
     (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
      int k, const void *alpha, const void *A, cudaDataType Atype, int lda, const void *B,
      cudaDataType Btype, int ldb, const void *beta, void *C, cudaDataType Ctype, int ldc,
      cublasComputeType_t computeType, cublasGemmAlgo_t algo),
     (handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc,
      computeType, algo))

/* ---- NCCL ------------------------------------------------------------------------------------ */
STUB(CU_DL_NCCL, ncclResult_t, ncclSystemError, ncclGetUniqueId, (ncclUniqueId * uniqueId),
     (uniqueId))
STUB(CU_DL_NCCL, ncclResult_t, ncclSystemError, ncclCommInitRank,
     (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank),
     (comm, nranks, commId, rank))
STUB(CU_DL_NCCL, ncclResult_t, ncclSystemError, ncclCommDestroy, (ncclComm_t comm), (comm))
STUB(CU_DL_NCCL, ncclResult_t, ncclSystemError, ncclAllReduce,
     (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
      ncclComm_t comm, cudaStream_t stream),
     (sendbuff, recvbuff, count, datatype, op, comm, stream))

const char *ncclGetErrorString(ncclResult_t result) {
    static void *fn;
    typedef const char *(*fn_t)(ncclResult_t);
    void *p = resolve(CU_DL_NCCL, "ncclGetErrorString", &fn);
    return p ? ((fn_t)p)(result) : cu_dl_error(CU_DL_NCCL);
}
