# embed.cmake — writes a file's bytes as a C array, so the chat page is part of the binary:
#   cmake -DSRC=index.html -DOUT=webui_html.c -DHEADER=/abs/src/server/webui.h -P embed.cmake
# defines cb_webui_html (the bytes, then a NUL that the length leaves out) and cb_webui_html_len.
# Plain CMake (file(READ ... HEX)) so that no xxd is needed.
foreach(v IN ITEMS SRC OUT HEADER)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "embed.cmake: -D${v}=... is required")
  endif()
endforeach()
file(READ "${SRC}" hex HEX)
string(LENGTH "${hex}" digits)
math(EXPR len "${digits} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
# 16 bytes a line (CMake's regular expressions have no {n})
set(line "")
foreach(i RANGE 15)
  string(APPEND line "0x[0-9a-f][0-9a-f],")
endforeach()
string(REGEX REPLACE "(${line})" "\\1\n" bytes "${bytes}")
file(WRITE "${OUT}.tmp"
  "/* Made by src/server/webui/embed.cmake from ${SRC}: not to be edited. */\n"
  "#include \"${HEADER}\"\n\n"
  "const unsigned char cb_webui_html[] = {\n${bytes}0x00};\n"
  "const size_t cb_webui_html_len = ${len};\n")
file(RENAME "${OUT}.tmp" "${OUT}")
