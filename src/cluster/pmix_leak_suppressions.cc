// LeakSanitizer's suppressions for libpmix, in sanitizer builds only
// (TANDEM_SANITIZE): libpmix keeps what PMIx_Init allocates (its MCA
// parameters, its shared-memory store's locks) past PMIx_Finalize, even when
// PMIx_Init fails, and every tandem process under mpirun or srun
// --mpi=pmix calls it (pmix_client.cc). Those blocks are libpmix's, made once
// per initialisation; without this every such process would end with a leak
// report.
//
// `leak:libpmix.so` matches a leak with any frame in libpmix. LSan's fast
// unwinder cannot walk out of glibc's vasprintf (built without frame
// pointers), so libpmix's pmix_asprintf allocations show only
// __vasprintf_internal: tandem itself never calls asprintf or vasprintf.
#if defined(__SANITIZE_ADDRESS__)
#define TANDEM_LSAN_HOOK 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TANDEM_LSAN_HOOK 1
#endif
#endif

#ifdef TANDEM_LSAN_HOOK
// Called by the sanitizer runtime at start-up (a weak hook it declares).
extern "C" const char* __lsan_default_suppressions() {
  return "leak:libpmix.so\n"
         "leak:__vasprintf_internal\n";
}
#endif
