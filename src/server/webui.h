/* webui.h — the chat page `cobatch serve` answers at GET / (src/server/webui/index.html), made into
 * C at build time by src/server/webui/embed.cmake. Static and read-only: any thread may read it. */
#ifndef CB_WEBUI_H
#define CB_WEBUI_H

#include <stddef.h>

extern const unsigned char cb_webui_html[]; /* (cb_webui_html_len) the page, UTF-8 HTML */
extern const size_t cb_webui_html_len;

#endif
