/* util.h — small helpers every layer uses. */
#ifndef CB_UTIL_H
#define CB_UTIL_H

#include <stddef.h>
#include <stdint.h>

/* Writes a formatted message into err (at most errlen bytes, always terminated); does nothing
 * when err is NULL or errlen is 0. */
void cb_set_err(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The monotonic clock in microseconds (cobatch_time_us's, for the layers below the API). */
int64_t cb_time_us(void);

/* A moving average of measured costs: x when avg is 0 (nothing measured yet), else avg moved a
 * share w (0 < w <= 1) of the way to x. */
static inline double cb_ewma(double avg, double x, double w) { return avg > 0 ? (1 - w) * avg + w * x : x; }

#endif
