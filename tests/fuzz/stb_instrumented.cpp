// stb_image and stb_image_resize compiled into the image fuzzer itself, from Debian's libstb-dev headers
// (the same version as the libstb the library links), so that libFuzzer's coverage and ASan see inside
// the decoders. Symbols defined in the executable take precedence over libstb.so's.
#define STB_IMAGE_IMPLEMENTATION
#define STB_IMAGE_RESIZE_IMPLEMENTATION
#include <stb_image.h>
#include <stb_image_resize.h>
