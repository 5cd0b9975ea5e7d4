#include "sluice/ops/image/codecs.h"

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <vector>

// clang-format off: jpeglib.h needs FILE and size_t declared first.
#include <jpeglib.h>
// clang-format on
#include <png.h>

namespace sluice::ops {
namespace {

// ---------------------------------------------------------------------------------------------
// JPEG. libjpeg reports errors by calling error_exit, which must not return: we longjmp back.
// Every libjpeg call sits in a small "phase" function that does setjmp and owns no C++
// object with a destructor, so the jump never skips one. Warnings (for instance premature
// end of data, which libjpeg would paper over with grey) are errors too.

struct JpegErrorManager {
  jpeg_error_mgr pub;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void JpegErrorExit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

void JpegEmitMessage(j_common_ptr cinfo, int msg_level) {
  if (msg_level < 0) JpegErrorExit(cinfo);  // a warning: corrupt data
}

struct JpegHeader {
  int width = 0;
  int height = 0;
  bool cmyk = false;
  bool adobe = false;
};

bool JpegReadHeaderPhase(jpeg_decompress_struct* cinfo, JpegErrorManager* err, const uint8_t* data,
                         size_t size, JpegHeader* header) {
  if (setjmp(err->jump)) return false;
  jpeg_create_decompress(cinfo);
  jpeg_mem_src(cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(cinfo, TRUE);
  header->width = static_cast<int>(cinfo->image_width);
  header->height = static_cast<int>(cinfo->image_height);
  header->cmyk = cinfo->jpeg_color_space == JCS_CMYK || cinfo->jpeg_color_space == JCS_YCCK;
  header->adobe = cinfo->saw_Adobe_marker;
  return true;
}

bool JpegScalePhase(jpeg_decompress_struct* cinfo, JpegErrorManager* err, int scale_num,
                    J_COLOR_SPACE out_space, int* out_width, int* out_height) {
  if (setjmp(err->jump)) return false;
  cinfo->out_color_space = out_space;
  cinfo->scale_num = static_cast<unsigned int>(scale_num);
  cinfo->scale_denom = 8;
  jpeg_calc_output_dimensions(cinfo);
  *out_width = static_cast<int>(cinfo->output_width);
  *out_height = static_cast<int>(cinfo->output_height);
  return true;
}

// Starts decompression, crops the columns to [*x, *x + *width) (libjpeg widens this to its
// iMCU grid and writes back what it chose) and skips the first `skip_rows` rows.
bool JpegStartPhase(jpeg_decompress_struct* cinfo, JpegErrorManager* err, bool crop, JDIMENSION* x,
                    JDIMENSION* width, JDIMENSION skip_rows) {
  if (setjmp(err->jump)) return false;
  jpeg_start_decompress(cinfo);
  if (crop) jpeg_crop_scanline(cinfo, x, width);
  if (skip_rows > 0) jpeg_skip_scanlines(cinfo, skip_rows);
  return true;
}

// Reads `rows` rows into `rows_out[0..rows)`, then finishes (when the image is read to the
// end, which also checks the end of the data) or aborts (rows below are not needed).
bool JpegReadPhase(jpeg_decompress_struct* cinfo, JpegErrorManager* err, JSAMPROW* rows_out,
                   int rows) {
  if (setjmp(err->jump)) return false;
  int done = 0;
  while (done < rows) {
    JDIMENSION n =
        jpeg_read_scanlines(cinfo, rows_out + done, static_cast<JDIMENSION>(rows - done));
    if (n == 0) {
      std::snprintf(err->message, sizeof(err->message), "decoder returned no rows at row %d", done);
      return false;
    }
    done += static_cast<int>(n);
  }
  if (cinfo->output_scanline >= cinfo->output_height) {
    jpeg_finish_decompress(cinfo);
  } else {
    jpeg_abort_decompress(cinfo);
  }
  return true;
}

class JpegDestroyer {
 public:
  explicit JpegDestroyer(jpeg_decompress_struct* cinfo) : cinfo_(cinfo) {}
  ~JpegDestroyer() { jpeg_destroy_decompress(cinfo_); }
  JpegDestroyer(const JpegDestroyer&) = delete;
  JpegDestroyer& operator=(const JpegDestroyer&) = delete;

 private:
  jpeg_decompress_struct* cinfo_;
};

Status JpegError(const JpegErrorManager& err) {
  return absl::DataLossError(absl::StrCat("corrupt JPEG: ", err.message));
}

int64_t RoundDownTo(int64_t v, int64_t step) { return v - v % step; }
int64_t RoundUpTo(int64_t v, int64_t step) { return (v + step - 1) / step * step; }

// One axis of a region request mapped to decoded pixels at scale `num`/8: [begin, end) in
// scaled pixels, widened so that both ends fall on whole full-resolution pixels.
void ScaledSpan(int64_t pos, int64_t len, int64_t full, int num, int64_t scaled_full,
                int64_t* begin, int64_t* end) {
  const int64_t step = num / std::gcd(num, 8);
  if (len <= 0) {
    *begin = 0;
    *end = scaled_full;
    return;
  }
  pos = std::clamp<int64_t>(pos, 0, full - 1);
  len = std::clamp<int64_t>(len, 1, full - pos);
  *begin = RoundDownTo(pos * num / 8, step);
  // ceil((pos + len) * num / 8), rounded up to a multiple of step.
  *end = std::min(scaled_full, RoundUpTo((pos + len) * num, 8 * step) / 8);
  if (*end <= *begin) *end = std::min(scaled_full, *begin + step);
}

// Full-resolution position of scaled pixel `p` (the far edge maps to `full`).
int64_t FullPosition(int64_t p, int num, int64_t scaled_full, int64_t full) {
  return p >= scaled_full ? full : std::min(full, p * 8 / num);
}

void CmykRowToRgb(const uint8_t* cmyk, uint8_t* out, int width, int channels, bool inverted) {
  for (int i = 0; i < width; ++i) {
    int c = cmyk[4 * i], m = cmyk[4 * i + 1], y = cmyk[4 * i + 2], k = cmyk[4 * i + 3];
    if (!inverted) {
      c = 255 - c;
      m = 255 - m;
      y = 255 - y;
      k = 255 - k;
    }
    // Adobe stores inverted CMYK, so c * k / 255 is (1 - C)(1 - K) in ink terms.
    int r = (c * k + 127) / 255, g = (m * k + 127) / 255, b = (y * k + 127) / 255;
    if (channels == 1) {
      out[i] = static_cast<uint8_t>((r * 299 + g * 587 + b * 114 + 500) / 1000);
    } else {
      out[3 * i] = static_cast<uint8_t>(r);
      out[3 * i + 1] = static_cast<uint8_t>(g);
      out[3 * i + 2] = static_cast<uint8_t>(b);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// PNG, through libpng's classic API (its simplified API guesses at gamma for 16-bit files and
// composites alpha; we want plain 8-bit samples). Same setjmp discipline as for JPEG.

struct PngReader {
  const uint8_t* data;
  size_t size;
  size_t pos;
  char message[256];
};

[[noreturn]] void PngErrorFn(png_structp png, png_const_charp message) {
  auto* reader = static_cast<PngReader*>(png_get_error_ptr(png));
  std::snprintf(reader->message, sizeof(reader->message), "%s", message);
  png_longjmp(png, 1);
}

void PngWarningFn(png_structp, png_const_charp) {}  // ancillary-chunk quibbles

void PngReadFn(png_structp png, png_bytep out, size_t length) {
  auto* reader = static_cast<PngReader*>(png_get_io_ptr(png));
  if (reader->size - reader->pos < length) png_error(png, "truncated: unexpected end of data");
  std::memcpy(out, reader->data + reader->pos, length);
  reader->pos += length;
}

struct PngInfo {
  int width = 0;
  int height = 0;
  size_t rowbytes = 0;
  int passes = 1;
  bool too_big = false;  // over the pixel limit: only width and height are set
};

bool PngHeaderPhase(png_structp png, png_infop info, int channels, int64_t max_pixels,
                    PngInfo* out) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_info(png, info);
  // The IHDR size, checked before png_read_update_info allocates rows for it. (libpng
  // itself caps each side at 1M, which would still let 10^12 pixels through.)
  const int64_t width = png_get_image_width(png, info);
  const int64_t height = png_get_image_height(png, info);
  if (width * height > max_pixels) {
    out->width = static_cast<int>(width);
    out->height = static_cast<int>(height);
    out->too_big = true;
    return true;
  }
  const int color_type = png_get_color_type(png, info);
  const int bit_depth = png_get_bit_depth(png, info);
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (bit_depth == 16) png_set_scale_16(png);
  if (color_type & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(png);
  const bool color = (color_type & PNG_COLOR_MASK_COLOR) != 0;
  if (channels == 3 && !color) png_set_gray_to_rgb(png);
  // Weights in 1/100000: 0.299 R + 0.587 G (+ 0.114 B), as in ITU-R BT.601.
  if (channels == 1 && color) png_set_rgb_to_gray_fixed(png, 1, 29900, 58700);
  out->passes = png_set_interlace_handling(png);
  png_read_update_info(png, info);
  out->width = static_cast<int>(png_get_image_width(png, info));
  out->height = static_cast<int>(png_get_image_height(png, info));
  out->rowbytes = png_get_rowbytes(png, info);
  return true;
}

bool PngRowsPhase(png_structp png, png_bytepp rows, int height, int passes) {
  if (setjmp(png_jmpbuf(png))) return false;
  for (int pass = 0; pass < passes; ++pass) png_read_rows(png, rows, nullptr, height);
  return true;
}

}  // namespace

Status CheckImagePixels(int64_t width, int64_t height, int64_t max_pixels) {
  const int64_t pixels = width * height;  // both < 2^32 (JPEG and PNG store 16/31 bits)
  if (pixels <= max_pixels) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "image is ", width, "x", height, " (", pixels, " pixels), over the limit of ", max_pixels,
      " pixels (raise it with options.max_image_pixels, on a worker with --max-image-pixels)"));
}

ImageFormat SniffImageFormat(std::string_view data) {
  static constexpr unsigned char kPng[8] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
  if (data.size() >= 3 && static_cast<unsigned char>(data[0]) == 0xFF &&
      static_cast<unsigned char>(data[1]) == 0xD8 && static_cast<unsigned char>(data[2]) == 0xFF) {
    return ImageFormat::kJpeg;
  }
  if (data.size() >= 8 && std::memcmp(data.data(), kPng, 8) == 0) return ImageFormat::kPng;
  return ImageFormat::kUnknown;
}

std::string_view NameOtherFormat(std::string_view data) {
  auto starts = [&](std::string_view magic) { return data.substr(0, magic.size()) == magic; };
  if (starts("GIF87a") || starts("GIF89a")) return "GIF";
  if (starts("BM")) return "BMP";
  if (starts("RIFF") && data.size() >= 12 && data.substr(8, 4) == "WEBP") return "WebP";
  if (starts(std::string_view("II*\0", 4)) || starts(std::string_view("MM\0*", 4))) return "TIFF";
  if (data.size() >= 12 && data.substr(4, 4) == "ftyp") return "HEIF/AVIF";
  return "";
}

StatusOr<DecodedImage> DecodeJpeg(std::string_view data, int channels, const DecodePlanner& planner,
                                  int64_t max_pixels) {
  if (data.empty()) return absl::InvalidArgumentError("cannot decode JPEG: empty input (0 bytes)");
  if (channels != 1 && channels != 3) {
    return absl::InvalidArgumentError(absl::StrCat("channels must be 1 or 3, got ", channels));
  }
  jpeg_decompress_struct cinfo;
  std::memset(&cinfo, 0, sizeof(cinfo));
  JpegErrorManager err;
  err.message[0] = '\0';
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = JpegErrorExit;
  err.pub.emit_message = JpegEmitMessage;
  JpegDestroyer destroyer(&cinfo);

  JpegHeader header;
  if (!JpegReadHeaderPhase(&cinfo, &err, reinterpret_cast<const uint8_t*>(data.data()), data.size(),
                           &header)) {
    return JpegError(err);
  }
  if (header.width <= 0 || header.height <= 0) {
    return absl::DataLossError(
        absl::StrCat("corrupt JPEG: image size ", header.width, "x", header.height));
  }
  // Before libjpeg allocates anything sized by the image (a progressive JPEG buffers all
  // its coefficients) and before our output.
  SLUICE_RETURN_IF_ERROR(CheckImagePixels(header.width, header.height, max_pixels));

  DecodeRequest request;
  if (planner) request = planner(header.height, header.width);
  // Only the power-of-two scales: libjpeg-turbo has SIMD code for their reduced IDCTs, while
  // 3/8, 5/8, 6/8 and 7/8 take a generic path slower than decoding at full size.
  int num = 8;
  for (int n : {1, 2, 4}) {
    if (n >= request.min_scale * 8 - 1e-9) {
      num = n;
      break;
    }
  }

  J_COLOR_SPACE space = header.cmyk ? JCS_CMYK : channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  int scaled_width = 0, scaled_height = 0;
  if (!JpegScalePhase(&cinfo, &err, num, space, &scaled_width, &scaled_height)) {
    return JpegError(err);
  }

  int64_t x0, x1, y0, y1;
  ScaledSpan(request.x, request.width, header.width, num, scaled_width, &x0, &x1);
  ScaledSpan(request.y, request.width > 0 ? request.height : 0, header.height, num, scaled_height,
             &y0, &y1);
  const bool crop = x0 > 0 || x1 < scaled_width;
  JDIMENSION crop_x = static_cast<JDIMENSION>(x0);
  JDIMENSION crop_width = static_cast<JDIMENSION>(x1 - x0);
  if (!JpegStartPhase(&cinfo, &err, crop, &crop_x, &crop_width, static_cast<JDIMENSION>(y0))) {
    return JpegError(err);
  }
  if (!crop) {
    crop_x = 0;
    crop_width = cinfo.output_width;
  }
  const int out_width = static_cast<int>(crop_width);
  const int rows = static_cast<int>(y1 - y0);

  DecodedImage result;
  result.image = Tensor::Empty(DType::kU8, {rows, out_width, channels});
  const int components = header.cmyk ? 4 : channels;
  std::vector<uint8_t> cmyk_buffer;
  if (header.cmyk) cmyk_buffer.resize(static_cast<size_t>(rows) * out_width * components);
  uint8_t* target = header.cmyk ? cmyk_buffer.data() : result.image.mutable_raw();
  std::vector<JSAMPROW> row_pointers(rows);
  for (int r = 0; r < rows; ++r) {
    row_pointers[r] = target + static_cast<size_t>(r) * out_width * components;
  }
  if (!JpegReadPhase(&cinfo, &err, row_pointers.data(), rows)) return JpegError(err);
  if (header.cmyk) {
    for (int r = 0; r < rows; ++r) {
      CmykRowToRgb(row_pointers[r],
                   result.image.mutable_raw() + static_cast<size_t>(r) * out_width * channels,
                   out_width, channels, header.adobe);
    }
  }

  if (num != 8 || crop || y0 > 0 || y1 < scaled_height) {
    ImageRegion& region = result.region;
    region.full_height = header.height;
    region.full_width = header.width;
    region.x = static_cast<int32_t>(FullPosition(crop_x, num, scaled_width, header.width));
    region.y = static_cast<int32_t>(FullPosition(y0, num, scaled_height, header.height));
    region.width = static_cast<int32_t>(
        FullPosition(crop_x + crop_width, num, scaled_width, header.width) - region.x);
    region.height =
        static_cast<int32_t>(FullPosition(y1, num, scaled_height, header.height) - region.y);
  }
  return result;
}

StatusOr<Tensor> DecodePng(std::string_view data, int channels, int64_t max_pixels) {
  if (data.empty()) return absl::InvalidArgumentError("cannot decode PNG: empty input (0 bytes)");
  if (channels != 1 && channels != 3) {
    return absl::InvalidArgumentError(absl::StrCat("channels must be 1 or 3, got ", channels));
  }
  PngReader reader{reinterpret_cast<const uint8_t*>(data.data()), data.size(), 0, {0}};
  png_structp png =
      png_create_read_struct(PNG_LIBPNG_VER_STRING, &reader, PngErrorFn, PngWarningFn);
  if (png == nullptr) return absl::ResourceExhaustedError("cannot create a PNG decoder");
  png_infop info = png_create_info_struct(png);
  struct Destroyer {
    png_structp* png;
    png_infop* info;
    ~Destroyer() { png_destroy_read_struct(png, info, nullptr); }
  } destroyer{&png, &info};
  if (info == nullptr) return absl::ResourceExhaustedError("cannot create a PNG decoder");
  png_set_read_fn(png, &reader, PngReadFn);

  PngInfo header;
  if (!PngHeaderPhase(png, info, channels, max_pixels, &header)) {
    return absl::DataLossError(absl::StrCat("corrupt PNG: ", reader.message));
  }
  if (header.too_big) return CheckImagePixels(header.width, header.height, max_pixels);
  if (header.width <= 0 || header.height <= 0 ||
      header.rowbytes != static_cast<size_t>(header.width) * channels) {
    return absl::DataLossError(absl::StrCat("corrupt PNG: unexpected layout ", header.width, "x",
                                            header.height, ", ", header.rowbytes,
                                            " bytes per row"));
  }
  Tensor image = Tensor::Empty(DType::kU8, {header.height, header.width, channels});
  std::vector<png_bytep> rows(header.height);
  for (int r = 0; r < header.height; ++r) rows[r] = image.mutable_raw() + r * header.rowbytes;
  if (!PngRowsPhase(png, rows.data(), header.height, header.passes)) {
    return absl::DataLossError(absl::StrCat("corrupt PNG: ", reader.message));
  }
  return image;
}

}  // namespace sluice::ops
