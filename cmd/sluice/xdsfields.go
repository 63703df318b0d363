package main

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/sluicehq/sluice/internal/service/rls"
)

// quotaModeField is the field of envoyproxy/ratelimit's
// RateLimitDescriptor (api/ratelimit/config/ratelimit/v3/rls_conf.proto:
// bool quota_mode = 7) that go-control-plane's ratelimit module v0.1.0,
// Sluice's copy of the message, does not have. protobuf-go keeps it as an
// unknown field, and descriptorFields reads it from there. A descriptor's
// metadata was added to the message later still, under a number that no
// copy Sluice could read gives, so it is not guessed: over xDS it is an
// unknown field like any other, and metadata comes from files.
const quotaModeField protowire.Number = 7

// problemFunc records a problem at a path of a resource.
type problemFunc func(path, format string, args ...any)

// descriptorFields reads raw, the unknown fields of the descriptor at
// path, into d: quota_mode as a newer control plane sends it, to be
// checked as the same key of a file is. A field of another
// number, a wrong wire type or a malformed value is a problem: the
// resource is refused rather than applied without it.
func descriptorFields(raw protoreflect.RawFields, d *rls.Descriptor, path string, add problemFunc) {
	for b := []byte(raw); len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			add(path, "malformed protobuf after the fields Sluice knows: %v", protowire.ParseError(n))
			return
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			add(path, "malformed field %d: %v", num, protowire.ParseError(m))
			return
		}
		v := b[:m]
		b = b[m:]
		switch num {
		case quotaModeField:
			if typ != protowire.VarintType {
				add(path+".quota_mode", "field 7 (quota_mode, a bool) has wire type %d, want %d (varint)", typ, protowire.VarintType)
				continue
			}
			x, _ := protowire.ConsumeVarint(v) // checked by ConsumeFieldValue
			d.QuotaMode = protowire.DecodeBool(x)
		default:
			add(path, "%s", unknownField(num, "RateLimitDescriptor"))
		}
	}
}

// unknownFields records a problem at path for each field of m, a message
// of type typeName, that its Go type does not know.
func unknownFields(m protoreflect.Message, path, typeName string, add problemFunc) {
	for b := []byte(m.GetUnknown()); len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			add(path, "malformed protobuf after the fields of %s that Sluice knows: %v", typeName, protowire.ParseError(n))
			return
		}
		b = b[n:]
		add(path, "%s", unknownField(num, typeName))
		if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
			return
		}
		b = b[n:]
	}
}

// unknownField says that field num of typeName is not one Sluice reads.
func unknownField(num protowire.Number, typeName string) string {
	return fmt.Sprintf("field %d of %s is not one Sluice knows (beyond go-control-plane's ratelimit module v0.1.0 it reads only a descriptor's quota_mode, 7); refused rather than applied without it", num, typeName)
}
