package main

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/sluicehq/sluice/internal/service/rls"
)

// The fields of envoyproxy/ratelimit's RateLimitDescriptor
// (api/ratelimit/config/ratelimit/v3/rls_conf.proto) that
// go-control-plane's ratelimit module v0.1.0, Sluice's copy of the
// message, does not have. protobuf-go keeps them as unknown fields, and
// descriptorFields reads them from there.
const (
	quotaModeField protowire.Number = 7 // bool quota_mode
	metadataField  protowire.Number = 8 // google.protobuf.Struct metadata
)

// problemFunc records a problem at a path of a resource.
type problemFunc func(path, format string, args ...any)

// descriptorFields reads raw, the unknown fields of the descriptor at
// path, into d: quota_mode and metadata as a newer control plane sends
// them, to be checked as the same keys of a file are. A field of another
// number, a wrong wire type or a malformed value is a problem: the
// resource is refused rather than applied without it.
func descriptorFields(raw protoreflect.RawFields, d *rls.Descriptor, path string, add problemFunc) {
	var md *structpb.Struct
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
		case metadataField:
			if typ != protowire.BytesType {
				add(path+".metadata", "field 8 (metadata, a google.protobuf.Struct) has wire type %d, want %d (bytes)", typ, protowire.BytesType)
				continue
			}
			x, _ := protowire.ConsumeBytes(v)
			if md == nil {
				md = &structpb.Struct{}
			}
			// A message field sent in parts is merged, as protobuf does.
			if err := (proto.UnmarshalOptions{Merge: true}).Unmarshal(x, md); err != nil {
				add(path+".metadata", "field 8 (metadata) is not a google.protobuf.Struct: %v", err)
				md = nil
				continue
			}
		default:
			add(path, "%s", unknownField(num, "RateLimitDescriptor"))
		}
	}
	if md != nil {
		d.Metadata = md.AsMap()
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
	return fmt.Sprintf("field %d of %s is not one Sluice knows (beyond go-control-plane's ratelimit module v0.1.0 it reads only a descriptor's quota_mode, 7, and metadata, 8); refused rather than applied without it", num, typeName)
}
