/* AMX tiles for the native kernels (amx_linear.c, amx_int8_linear.c, amx_prefill.c): the
 * tile configuration's layout, loading one for the calling thread, and the process's
 * request for the tile state. Include it where the compiler targets AMX (__AMX_TILE__),
 * after <immintrin.h>, in a file that defines _GNU_SOURCE first (syscall() under -std=c11).
 */
#ifndef ACTORLLM_AMX_TILES_H
#define ACTORLLM_AMX_TILES_H

#include <stdint.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

typedef struct {
    uint8_t palette_id;
    uint8_t start_row;
    uint8_t reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;

/* Linux hands out the tile state only on request, once per process: 1 when granted. */
static inline int amx_request_tiles(void) {
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0 ? 1 : 0;
}

/* The calling thread's 8 tiles, tile t rows[t] rows (0: 1) of 64 bytes. */
static inline void tiles_configure(const int rows[8]) {
    tile_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette_id = 1;
    for (int t = 0; t < 8; t++) {
        cfg.rows[t] = (uint8_t)(rows[t] ? rows[t] : 1);
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
}

/* Every tile 16 rows x 64 bytes. */
static inline void tiles_configure_full(void) {
    const int rows[8] = {16, 16, 16, 16, 16, 16, 16, 16};
    tiles_configure(rows);
}

#endif
