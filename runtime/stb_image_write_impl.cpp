// stb_image_write compiled from Debian's libstb-dev header (its own object, linked only into what writes
// images: tests and the fuzz seed generator). edgevit does not link Debian's prebuilt libstb, which
// would bring a second, unbudgeted copy of every stbi_* function (runtime/stb_image_impl.cpp).
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb_image_write.h>
