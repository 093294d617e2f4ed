// ConvDescriptor: grammar, normalised form, validation, metrics and TSV layer sets.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "schedules/conv_descriptor.h"
#include "schedules/errors.h"
#include "schedules/tap_window.h"

using convgen::Activation;
using convgen::activation_flag;
using convgen::activation_is_exact;
using convgen::ConvDescriptor;
using convgen::Error;
using convgen::ExitCode;
using convgen::parse_descriptor;

namespace {

// Runs f, which must throw convgen::Error, and returns that error.
template <class F>
Error error_from(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  FAIL("expected a convgen::Error");
  return Error(ExitCode::Ok, "");
}

std::string parse_error(const std::string& text) {
  const Error e = error_from([&] { parse_descriptor(text); });
  CHECK(e.code() == ExitCode::Usage);
  return e.what();
}

std::string validate_error(const ConvDescriptor& d) {
  const Error e = error_from([&] { convgen::validate(d); });
  CHECK(e.code() == ExitCode::Usage);
  return e.what();
}

// A valid 3x3 layer to perturb in validation tests.
ConvDescriptor base_layer() {
  ConvDescriptor d;
  d.mb = 2, d.ic = 16, d.ih = 8, d.iw = 8, d.oc = 32, d.kh = 3, d.kw = 3;
  d.pt = d.pb = d.pl = d.pr = 1;
  return d;
}

std::string layers_file(const char* name) { return std::string(CONVGEN_LAYERS_DIR "/") + name; }

}  // namespace

TEST_CASE("benchdnn examples parse with benchdnn defaults", "[descriptor]") {
  SECTION("named 3x3 layer: square defaults, mb given") {
    const ConvDescriptor d = parse_descriptor("mb8ic64ih56oc64oh56kh3ph1n\"res2a\"");
    CHECK(d.name == "res2a");
    CHECK(d.mb == 8);
    CHECK(d.ic == 64);
    CHECK(d.oc == 64);
    CHECK((d.ih == 56 && d.iw == 56));
    CHECK((d.kh == 3 && d.kw == 3));
    CHECK((d.sh == 1 && d.sw == 1));
    CHECK((d.pt == 1 && d.pb == 1 && d.pl == 1 && d.pr == 1));
    CHECK((d.dh == 1 && d.dw == 1));
    CHECK(d.g == 1);
    CHECK((d.oh() == 56 && d.ow() == 56));
    CHECK(!d.bias);
    CHECK(!d.relu);
  }
  SECTION("grouped") {
    const ConvDescriptor d = parse_descriptor("g32mb8ic256ih56oc256oh56kh3ph1");
    CHECK(d.g == 32);
    CHECK(d.icg() == 8);
    CHECK(d.ocg() == 8);
    CHECK(!d.depthwise());
  }
  SECTION("mb defaults to 1") {
    const ConvDescriptor d = parse_descriptor("ic3ih224oc64oh112kh7sh2ph3");
    CHECK(d.mb == 1);
    CHECK((d.sh == 2 && d.sw == 2));
    CHECK((d.oh() == 112 && d.ow() == 112));
    // benchdnn derives the minimal bottom/right padding from oh/ow.
    CHECK((d.pt == 3 && d.pb == 2 && d.pl == 3 && d.pr == 2));
  }
  SECTION("benchdnn dilation dh1 is ONNX dilation 2") {
    const ConvDescriptor d = parse_descriptor("mb2ic16ih32oc16kh3dh1ph2");
    CHECK((d.dh == 2 && d.dw == 2));
    CHECK((d.oh() == 32 && d.ow() == 32));
    CHECK(d.normalised().find("dh1dw1") != std::string::npos);
  }
  SECTION("dh0 is dense, dw can differ from dh") {
    CHECK(parse_descriptor("ic4ih9oc4kh3dh0").dh == 1);
    const ConvDescriptor d = parse_descriptor("ic4ih9oc4kh3dh2dw0");
    CHECK((d.dh == 3 && d.dw == 1));
  }
  SECTION("oh that the symmetric padding already gives leaves pb alone") {
    const ConvDescriptor d = parse_descriptor("ic3ih225oc64oh112kh3sh2ph0");
    CHECK((d.pt == 0 && d.pb == 0 && d.oh() == 112));
  }
  SECTION("oh implies asymmetric padding (TensorFlow SAME, stride 2)") {
    const ConvDescriptor d = parse_descriptor("ic3ih224oc32oh112kh3sh2ph0");
    CHECK((d.pt == 0 && d.pb == 1 && d.pl == 0 && d.pr == 1));
    CHECK((d.oh() == 112 && d.ow() == 112));
  }
  SECTION("oh larger than the padding gives: pb exceeds pt") {
    const ConvDescriptor d = parse_descriptor("ic8ih10oc8oh12kh3ph1");
    CHECK((d.pt == 1 && d.pb == 3 && d.oh() == 12));
  }
  SECTION("benchdnn spelling with _ separators and _n") {
    const ConvDescriptor d =
        parse_descriptor("ic3ih227iw227_oc96oh55ow55_kh11kw11_sh4sw4ph0pw0_n\"alexnet:conv1\"");
    CHECK(d.name == "alexnet:conv1");
    CHECK((d.kh == 11 && d.sw == 4 && d.oh() == 55 && d.ow() == 55));
  }
  SECTION("whitespace around is trimmed; key order is free") {
    CHECK(parse_descriptor("  \tkh3oc8ih10ic4mb2\n") == parse_descriptor("mb2ic4ih10oc8kh3"));
  }
}

TEST_CASE("non-square keys and explicit paddings", "[descriptor]") {
  SECTION("w keys override the square defaults") {
    const ConvDescriptor d = parse_descriptor("ic128ih17oc128kh7kw1ph3pw0");
    CHECK((d.iw == 17 && d.kw == 1 && d.pl == 0 && d.pr == 0 && d.pt == 3 && d.pb == 3));
    CHECK((d.oh() == 17 && d.ow() == 17));
  }
  SECTION("pt/pb/pl/pr override ph/pw") {
    const ConvDescriptor d = parse_descriptor("ic4ih10oc4kh3ph1pw2pb0pl3");
    CHECK((d.pt == 1 && d.pb == 0 && d.pl == 3 && d.pr == 2));
  }
  SECTION("an explicit pb wins over derivation; oh is then checked") {
    const ConvDescriptor d = parse_descriptor("ic4ih10oc4oh10kh3pt2pb0");
    CHECK((d.pt == 2 && d.pb == 0));
  }
  SECTION("ow mirrors oh only for a square descriptor") {
    // iw given: ow is computed from pl/pr instead of copied from oh.
    const ConvDescriptor d = parse_descriptor("ic4ih56iw28oc4oh56kh3ph1");
    CHECK((d.ow() == 28 && d.pl == 1 && d.pr == 1));
  }
  SECTION("ow alone derives pr") {
    const ConvDescriptor d = parse_descriptor("ic4ih8iw8oc4ow9kh3pw1");
    CHECK((d.pl == 1 && d.pr == 2 && d.ow() == 9 && d.oh() == 6));
  }
  SECTION("flags, in any order, also before the name") {
    const ConvDescriptor a = parse_descriptor("mb8ic64ih56oc64oh56kh3ph1+bias+relu");
    CHECK((a.bias && a.relu));
    const ConvDescriptor b = parse_descriptor("mb8ic64ih56oc64oh56kh3ph1+relu_+bias");
    CHECK(a == b);
    const ConvDescriptor c = parse_descriptor("ic4ih8oc4kh3+relun\"x\"");
    CHECK((c.relu && !c.bias && c.name == "x"));
  }
  SECTION("depthwise") {
    const ConvDescriptor d = parse_descriptor("g32mb32ic32ih112oc32kh3ph1");
    CHECK(d.depthwise());
  }
}

TEST_CASE("normalised form", "[descriptor]") {
  SECTION("fixed key order, every key explicit, benchdnn dilation") {
    CHECK(parse_descriptor("mb8ic64ih56oc64oh56kh3ph1n\"res2a\"+bias").normalised() ==
          "g1mb8ic64ih56iw56oc64oh56ow56kh3kw3sh1sw1pt1pb1pl1pr1dh0dw0+bias");
    CHECK(parse_descriptor("ic3ih224oc32oh112kh3sh2ph0dh0+relu+bias").normalised() ==
          "g1mb1ic3ih224iw224oc32oh112ow112kh3kw3sh2sw2pt0pb1pl0pr1dh0dw0+bias+relu");
  }
  SECTION("to_string appends the name; the name is not part of equality") {
    const ConvDescriptor d = parse_descriptor("mb8ic64ih56oc64oh56kh3ph1n\"res2a\"");
    CHECK(d.to_string() == d.normalised() + "n\"res2a\"");
    ConvDescriptor unnamed = d;
    unnamed.name.clear();
    CHECK(unnamed.to_string() == unnamed.normalised());
    CHECK(unnamed == d);
  }
  SECTION("a name with a quote cannot be printed") {
    ConvDescriptor d = base_layer();
    d.name = "a\"b";
    const Error e = error_from([&] { (void)d.to_string(); });
    CHECK(e.code() == ExitCode::Usage);
    CHECK_THAT(std::string(e.what()), Catch::Contains("name"));
  }
  SECTION("equality sees every field") {
    ConvDescriptor a = base_layer(), b = base_layer();
    CHECK(a == b);
    b.pr = 0;
    CHECK_FALSE(a == b);
    b = a;
    b.relu = true;
    CHECK_FALSE(a == b);
  }
}

TEST_CASE("normalised and to_string round-trip through the parser", "[descriptor]") {
  const std::vector<std::string> texts = {
      "mb8ic64ih56oc64oh56kh3ph1n\"res2a\"",
      "g32mb8ic256ih56oc256oh56kh3ph1",
      "ic3ih224oc64oh112kh7sh2ph3",
      "ic3ih225oc64oh112kh3sh2ph0",
      "ic3ih224oc32oh112kh3sh2ph0+bias",
      "mb2ic16ih32oc16kh3dh1ph2+bias+relu",
      "mb4ic16ih31iw17oc24kh5kw3sh3sw2pt2pb0pl1pr3dh2dw1n\"odd\"",
      "g4mb1ic8ih9oc12kh3pt0pb3pl4pr0+relu",
      "g16mb3ic16ih7oc32kh1n\"dw with spaces: ok\"",
      "ic1ih1oc1kh1",
      "ic128ih17oc128kh7kw1ph3pw0n\"asym_7x1\"",
      "mb64ic3ih227oc96oh55kh11sh4",
      "ic4ih8oc4ow9kh3pw1",
      "ic8ih10oc8oh12kh3ph1n\"\"",
  };
  for (const std::string& text : texts) {
    INFO(text);
    const ConvDescriptor d = parse_descriptor(text);
    const ConvDescriptor again = parse_descriptor(d.normalised());
    CHECK(again == d);
    CHECK(again.normalised() == d.normalised());
    CHECK(again.name.empty());
    const ConvDescriptor named = parse_descriptor(d.to_string());
    CHECK(named == d);
    CHECK(named.name == d.name);
    CHECK(named.to_string() == d.to_string());
  }

  SECTION("descriptors built in code, including asymmetric padding") {
    ConvDescriptor d = base_layer();
    d.pt = 0, d.pb = 2, d.pl = 3, d.pr = 1;
    d.sh = 2, d.sw = 3, d.dh = 2, d.dw = 3;
    d.g = 4, d.bias = true, d.name = "built";
    convgen::validate(d);
    const ConvDescriptor again = parse_descriptor(d.to_string());
    CHECK(again == d);
    CHECK((again.pt == 0 && again.pb == 2 && again.pl == 3 && again.pr == 1));
    CHECK((again.dh == 2 && again.dw == 3));
    CHECK(again.name == "built");
  }
}

TEST_CASE("activation flags parse, print and round-trip", "[descriptor]") {
  const ConvDescriptor clip = parse_descriptor("ic8ih4oc8kh1+bias+clip(0,6)");
  CHECK(clip.bias);
  CHECK(clip.activation == Activation::Clip);
  CHECK(clip.clip_lo == 0.0f);
  CHECK(clip.clip_hi == 6.0f);
  CHECK(clip.normalised() == "g1mb1ic8ih4iw4oc8oh4ow4kh1kw1sh1sw1pt0pb0pl0pr0dh0dw0+bias+clip(0,6)");
  const ConvDescriptor leaky = parse_descriptor("ic8ih4oc8kh1+leakyrelu(0.01)");
  CHECK(leaky.activation == Activation::LeakyRelu);
  CHECK(leaky.leaky_alpha == 0.01f);
  CHECK(activation_flag(leaky) == "leakyrelu(0.01)");
  CHECK(parse_descriptor("ic8ih4oc8kh1+hardswish").activation == Activation::HardSwish);
  CHECK(parse_descriptor("ic8ih4oc8kh1+silu").activation == Activation::Silu);
  CHECK_FALSE(activation_is_exact(parse_descriptor("ic8ih4oc8kh1+silu")));
  CHECK(activation_is_exact(leaky));
  // ONNX Clip's default bounds are the float limits; any float reads back to itself.
  ConvDescriptor wide = clip;
  wide.clip_lo = -3.4028235e38f;
  wide.clip_hi = 0.1f;
  const ConvDescriptor back = parse_descriptor(wide.normalised());
  CHECK(back.clip_lo == wide.clip_lo);
  CHECK(back.clip_hi == wide.clip_hi);
  CHECK(back == wide);
  CHECK_FALSE(parse_descriptor("ic8ih4oc8kh1+clip(0,6)") == parse_descriptor("ic8ih4oc8kh1+clip(0,6.5)"));
  CHECK_FALSE(parse_descriptor("ic8ih4oc8kh1+silu") == parse_descriptor("ic8ih4oc8kh1+hardswish"));
}

TEST_CASE("grammar errors name the field or position", "[descriptor][errors]") {
  struct Case {
    const char* text;
    const char* fragment;
  };
  const Case cases[] = {
      {"", "empty"},
      {"   ", "empty"},
      {"ih56oc64kh3", "ic: required key missing"},
      {"ic3oc64kh3", "ih: required key missing"},
      {"ic3ih56kh3", "oc: required key missing"},
      {"ic3ih56oc64", "kh: required key missing"},
      {"ic3ih56oc64kh3xy7", "unknown key at position 15 (\"xy7\")"},
      {"ic3ih56oc64kh3 ph1", "unknown key at position 15"},
      {"ic3ih56oc64khx", "kh: expected a number at position 14"},
      {"ic3ih56oc64kh", "kh: expected a number at end of text"},
      {"ic3ih56oc64kh3ph-1", "ph: expected a number"},
      {"ic3ih56oc64kh3+gelu", "unknown flag"},
      {"ic3ih56oc64kh3+", "unknown flag"},
      {"ic3ih56oc64kh3+bias+bias", "bias: given twice"},
      {"ic3ih56oc64kh3ic4", "ic: given twice"},
      {"ic3ih56oc64kh3n\"a", "name: missing closing quote"},
      {"ic3ih56oc64kh3nabc", "name: expected n\""},
      {"ic3ih56oc64kh3n\"a\"n\"b\"", "name: given twice"},
      {"ic3ih56oc64kh3n\"a\"x", "unknown key"},
      {"ic3ih99999999999oc4kh3", "ih: number too large"},
      {"ic3ih56oc64kh3oh50", "oh: 50 is unreachable"},
      {"ic3ih56oc64kh3ow50", "ow: 50 is unreachable"},
      {"ic3ih56oc64kh3pt1pb1oh57", "oh: 57 does not match"},
      {"ic3ih56oc64kh3oh0", "oh"},
      {"ic3ih56oc64kh3sh0", "sh: must be >= 1"},
      {"ic0ih56oc64kh3", "ic: must be >= 1"},
      {"mb0ic3ih56oc64kh3", "mb: must be >= 1"},
      {"g0ic3ih56oc64kh3", "g: must be >= 1"},
      {"ic3ih56oc64kh0", "kh: must be >= 1"},
      {"g2ic3ih56oc64kh3", "ic: 3 is not divisible by g = 2"},
      {"g2ic4ih56oc63kh3", "oc: 63 is not divisible by g = 2"},
      {"ic3ih5oc4kh9", "oh: output would be empty"},
      {"ic3ih5iw2oc4kh1kw3", "ow: output would be empty"},
      {"ic3ih5oc4kh3dh3", "oh: output would be empty"},
      {"ic3ih5oc4kh3ph1048576", "pt: must be < 2^20"},
      {"ic3ih5oc4kh3pr1048576", "pr: must be < 2^20"},
      {"ic3ih5oc4kh3+relu+silu", "silu: a second activation"},
      {"ic3ih5oc4kh3+clip(0,6)+relu", "relu: a second activation"},
      {"ic3ih5oc4kh3+clip", "clip: expected (2 numbers)"},
      {"ic3ih5oc4kh3+clip(0,6", "clip: missing ')'"},
      {"ic3ih5oc4kh3+clip(0)", "clip: expected 2 numbers, got 1"},
      {"ic3ih5oc4kh3+clip(6,0)", "clip: needs LO <= HI"},
      {"ic3ih5oc4kh3+clip(0,x)", "clip: \"x\" is not a finite number"},
      {"ic3ih5oc4kh3+leakyrelu(inf)", "leakyrelu: \"inf\" is not a finite number"},
      {"ic3ih5oc4kh3+leakyrelu()", "leakyrelu: \"\" is not a finite number"},
      {"ic3ih5oc4kh3+residual+residual", "residual: given twice"},
      {"ic3ih5oc4kh3+outstride(8)+outstride(8)", "outstride: given twice"},
      {"ic3ih5oc4kh3+outstride", "outstride: expected (CHANNELS)"},
      {"ic3ih5oc4kh3+outstride(8", "outstride: missing ')'"},
      {"ic3ih5oc4kh3+outstride(0)", "outstride: needs CHANNELS >= 1"},
      {"ic3ih5oc4kh3+outstride(x)", "outstride: expected a number"},
      {"ic3ih5oc4kh3+outstride(3)", "outstride: 3 channels cannot hold the layer's 4 output channels"},
  };
  for (const Case& c : cases) {
    INFO(c.text);
    const std::string message = parse_error(c.text);
    CHECK_THAT(message, Catch::StartsWith("bad descriptor: "));
    CHECK_THAT(message, Catch::Contains(c.fragment));
    CHECK(message.find('\n') == std::string::npos);
  }
}

TEST_CASE("validate rejects invalid descriptors built in code", "[descriptor][errors]") {
  CHECK_NOTHROW(convgen::validate(base_layer()));
  ConvDescriptor d = base_layer();

  SECTION("sizes") {
    const std::pair<int64_t ConvDescriptor::*, const char*> fields[] = {
        {&ConvDescriptor::mb, "mb"}, {&ConvDescriptor::ic, "ic"}, {&ConvDescriptor::ih, "ih"},
        {&ConvDescriptor::iw, "iw"}, {&ConvDescriptor::oc, "oc"}, {&ConvDescriptor::kh, "kh"},
        {&ConvDescriptor::kw, "kw"}, {&ConvDescriptor::sh, "sh"}, {&ConvDescriptor::sw, "sw"},
        {&ConvDescriptor::dh, "dh"}, {&ConvDescriptor::dw, "dw"}, {&ConvDescriptor::g, "g"}};
    for (const auto& [member, field] : fields) {
      INFO(field);
      ConvDescriptor bad = base_layer();
      bad.*member = 0;
      CHECK_THAT(validate_error(bad), Catch::StartsWith(std::string("bad descriptor: ") + field +
                                                        ": must be >= 1"));
      bad.*member = int64_t{1} << 31;
      CHECK_THAT(validate_error(bad), Catch::Contains(std::string(field) + ":"));
    }
  }
  SECTION("negative padding") {
    d.pl = -1;
    CHECK_THAT(validate_error(d), Catch::Contains("pl: must be >= 0"));
  }
  SECTION("padding >= 2^20") {
    d.pb = int64_t{1} << 20;
    CHECK_THAT(validate_error(d), Catch::Contains("pb: must be < 2^20"));
  }
  SECTION("padding larger than the kernel is allowed") {
    d.pt = d.pb = 7;
    CHECK_NOTHROW(convgen::validate(d));
  }
  SECTION("groups") {
    d.g = 3;
    const std::string message = validate_error(d);
    CHECK_THAT(message, Catch::Contains("ic:"));
    CHECK_THAT(message, Catch::Contains("g = 3"));
  }
  SECTION("name with a quote") {
    d.name = "x\"y";
    CHECK_THAT(validate_error(d), Catch::Contains("name:"));
  }
}

TEST_CASE("tensors of 2^31 or more elements are rejected", "[descriptor][errors]") {
  SECTION("input") {
    CHECK_THAT(parse_error("mb64ic64ih1024oc64kh1"), Catch::Contains("input tensor: 4294967296"));
    // One element below the limit is fine: 2^31 - 1 = 7 * 151 * 2031671 (all prime).
    CHECK_NOTHROW(parse_descriptor("mb7ic151ih2031671iw1oc1kh1"));
    CHECK_THAT(parse_error("mb8ic16384ih16384iw1oc1kh1"), Catch::Contains("input tensor"));
  }
  SECTION("output") {
    CHECK_THAT(parse_error("ic1ih32768oc4kh1"), Catch::Contains("output tensor"));
  }
  SECTION("weights") {
    CHECK_THAT(parse_error("ic65536ih1oc65536kh1"), Catch::Contains("weights tensor"));
  }
  SECTION("padded input") {
    CHECK_THAT(parse_error("ic1ih32768oc1kh1sh2ph16384"), Catch::Contains("padded input tensor"));
  }
  SECTION("huge values do not overflow the check") {
    ConvDescriptor d = base_layer();
    d.mb = d.ic = d.oc = d.ih = d.iw = (int64_t{1} << 31) - 1;
    CHECK_THAT(validate_error(d), Catch::Contains("input tensor"));
  }
}

TEST_CASE("flops and im2col bytes", "[descriptor]") {
  const ConvDescriptor res2a = parse_descriptor("mb8ic64ih56oc64oh56kh3ph1");
  CHECK(res2a.flops() == Approx(1849688064.0));
  CHECK(res2a.im2col_bytes() == 57802752);

  const ConvDescriptor grouped = parse_descriptor("g32mb8ic256ih56oc256oh56kh3ph1");
  CHECK(grouped.flops() == Approx(924844032.0));
  CHECK(grouped.im2col_bytes() == 231211008);

  const ConvDescriptor conv1 = parse_descriptor("ic3ih224oc64oh112kh7sh2ph3");
  CHECK(conv1.flops() == Approx(236027904.0));
  CHECK(conv1.im2col_bytes() == 7375872);

  const ConvDescriptor one = parse_descriptor("ic1ih1oc1kh1");
  CHECK(one.flops() == 2.0);
  CHECK(one.im2col_bytes() == 4);
}

TEST_CASE("TSV rows use ONNX conventions", "[descriptor][tsv]") {
  SECTION("a good row") {
    const ConvDescriptor d =
        convgen::parse_tsv_row("dilated\t32\t64\t56\t56\t64\t3\t3\t1\t1\t2\t2\t2\t2\t1", "t:1");
    CHECK(d.name == "dilated");
    CHECK((d.mb == 32 && d.ic == 64 && d.oc == 64 && d.ih == 56 && d.iw == 56));
    CHECK((d.dh == 2 && d.dw == 2));  // ONNX dilation, not benchdnn's d-1
    CHECK((d.pt == 2 && d.pb == 2 && d.pl == 2 && d.pr == 2));
    CHECK((d.oh() == 56 && d.ow() == 56));
    CHECK(d == parse_descriptor("mb32ic64ih56oc64kh3ph2dh1"));
  }
  SECTION("spaces separate columns too") {
    const ConvDescriptor d = convgen::parse_tsv_row("  x 1 4 8 8 4 3 1 1 1 1 0 1 1 2  ", "t:2");
    CHECK((d.kw == 1 && d.pl == 0 && d.g == 2));
  }
  SECTION("wrong column count") {
    const Error e = error_from([] { convgen::parse_tsv_row("x 1 4 8 8 4 3 1 1 1 1 0 1 1", "f.tsv:3"); });
    CHECK(e.code() == ExitCode::Usage);
    CHECK_THAT(std::string(e.what()), Catch::StartsWith("f.tsv:3: bad layer row: expected 15 columns"));
  }
  SECTION("non-integer") {
    const Error e = error_from([] { convgen::parse_tsv_row("x 1 4 8 8 4 3x 1 1 1 1 0 1 1 1", "f.tsv:4"); });
    CHECK(e.code() == ExitCode::Usage);
    CHECK_THAT(std::string(e.what()), Catch::StartsWith("f.tsv:4: bad layer row: column kh"));
  }
  SECTION("invalid layer names its row and field") {
    const Error e = error_from([] { convgen::parse_tsv_row("x 1 4 8 8 4 3 3 1 1 -1 0 1 1 1", "f.tsv:5"); });
    CHECK(e.code() == ExitCode::Usage);
    CHECK_THAT(std::string(e.what()), Catch::StartsWith("f.tsv:5: bad descriptor: pt:"));
  }
}

TEST_CASE("every shared layer set parses and validates", "[descriptor][tsv]") {
  const std::pair<const char*, size_t> sets[] = {
      {"alexnet.tsv", 5},      {"cifar10_full.tsv", 3}, {"lenet.tsv", 2},
      {"odd_shapes.tsv", 7},   {"resnet50_v15.tsv", 23}, {"vgg16.tsv", 9},
      {"small_images.tsv", 7}};
  for (const auto& [file, count] : sets) {
    INFO(file);
    const std::vector<ConvDescriptor> layers = convgen::read_layer_set(layers_file(file));
    CHECK(layers.size() == count);
    for (const ConvDescriptor& d : layers) {
      INFO(d.to_string());
      CHECK_FALSE(d.name.empty());
      CHECK(parse_descriptor(d.to_string()) == d);
    }
  }

  SECTION("odd shapes keep their asymmetric and dilated geometry") {
    const auto layers = convgen::read_layer_set(layers_file("odd_shapes.tsv"));
    auto find = [&](const std::string& name) {
      for (const ConvDescriptor& d : layers)
        if (d.name == name) return d;
      FAIL("no layer " << name);
      return ConvDescriptor{};
    };
    const ConvDescriptor asym = find("asym_7x1");
    CHECK((asym.kh == 7 && asym.kw == 1 && asym.pt == 3 && asym.pl == 0));
    CHECK((asym.oh() == 17 && asym.ow() == 17));
    const ConvDescriptor dil = find("dilated_3x3_d2");
    CHECK((dil.dh == 2 && dil.oh() == 56));
    CHECK(find("mbv2_dw3x3_s2").depthwise());
    const ConvDescriptor odd = find("odd_size_5x5_s3");
    CHECK((odd.oh() == 12 && odd.ow() == 13));
  }

  SECTION("small images: which rows have taps that read only padding") {
    const auto layers = convgen::read_layer_set(layers_file("small_images.tsv"));
    for (const ConvDescriptor& d : layers) {
      INFO(d.name);
      const convgen::TapWindow w = convgen::useful_taps(d);
      if (d.name == "img1_512_3x3") {
        CHECK((w.r0 == 1 && w.kh == 1 && w.s0 == 1 && w.kw == 1 && d.oh() == 1));
      } else if (d.name == "img2_256to512_3x3_s2") {
        CHECK((w.r0 == 1 && w.kh == 2 && w.s0 == 1 && w.kw == 2 && d.oh() == 1));
      } else {
        CHECK(w.whole(d));  // 2x2 and 4x4 stride-1 images read real input through every tap
      }
    }
  }
}

TEST_CASE("read_layer_set skips comments and reports rows and I/O", "[descriptor][tsv]") {
  SECTION("missing file is an I/O error") {
    const Error e = error_from([] { convgen::read_layer_set("/nonexistent/layers.tsv"); });
    CHECK(e.code() == ExitCode::Io);
    CHECK(std::string(e.what()) == "/nonexistent/layers.tsv: cannot read");
  }
  SECTION("comments, blank lines and the header row are skipped; bad rows name path:line") {
    char path_template[] = "/tmp/convgen_layers_XXXXXX";
    const int fd = mkstemp(path_template);
    REQUIRE(fd >= 0);
    close(fd);
    const std::string path = path_template;
    {
      std::ofstream out(path);
      out << "# comment\n\n"
             "name\tmb\tic\tih\tiw\toc\tkh\tkw\tsh\tsw\tph\tpw\tdh\tdw\tg\n"
             "  # indented comment\n"
             "a\t1\t4\t8\t8\t4\t3\t3\t1\t1\t1\t1\t1\t1\t1\r\n"
             "   \t\n"
             "b\t1\t4\t8\t8\t4\t3\t3\t1\t1\t1\t1\t1\t1\t3\n";
    }
    const Error e = error_from([&] { convgen::read_layer_set(path); });
    std::remove(path.c_str());
    CHECK(e.code() == ExitCode::Usage);
    CHECK_THAT(std::string(e.what()), Catch::StartsWith(path + ":7: bad descriptor: ic:"));
  }
}
