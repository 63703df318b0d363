package rls

import (
	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// dynamicMetadata returns the dynamic metadata of the answer to req, whose
// descriptors were decided as items with statuses, in
// envoyproxy/ratelimit's form (RESPONSE_DYNAMIC_METADATA):
//
//   - "domain": the request's domain;
//   - "descriptors": one struct per request descriptor, its "entries" as
//     "key=value" texts, with "limit" (Envoy's limit override, in
//     protobuf's text form) and "hitsAddend" when the descriptor has them;
//   - "hitsAddend": the request's hits_addend, when not 0;
//   - "metadata": the configured metadata of the descriptors that matched a
//     limit that counts and are not OVER_LIMIT, merged in the request's
//     order; when two give the same name, mappings are merged and
//     otherwise the first value stays. Left out when there is none.
func dynamicMetadata(req *rlsv3.RateLimitRequest, items []item, statuses []*rlsv3.RateLimitResponse_DescriptorStatus) *structpb.Struct {
	descs := make([]*structpb.Value, 0, len(req.GetDescriptors()))
	for _, d := range req.GetDescriptors() {
		descs = append(descs, structpb.NewStructValue(descriptorStruct(d)))
	}
	fields := map[string]*structpb.Value{
		"domain":      structpb.NewStringValue(req.GetDomain()),
		"descriptors": structpb.NewListValue(&structpb.ListValue{Values: descs}),
	}
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	var merged *structpb.Struct
	for i := range items {
		it := &items[i]
		if it.metadata == nil || !it.matched || it.unlimited || statuses[i].GetCode() == rlsv3.RateLimitResponse_OVER_LIMIT {
			continue
		}
		if merged == nil {
			merged = &structpb.Struct{Fields: map[string]*structpb.Value{}}
		}
		mergeStruct(merged, it.metadata)
	}
	if merged != nil && len(merged.Fields) > 0 {
		fields["metadata"] = structpb.NewStructValue(merged)
	}
	return &structpb.Struct{Fields: fields}
}

// descriptorStruct is one request descriptor in the dynamic metadata.
func descriptorStruct(d *rlscommon.RateLimitDescriptor) *structpb.Struct {
	entries := make([]*structpb.Value, 0, len(d.GetEntries()))
	for _, e := range d.GetEntries() {
		entries = append(entries, structpb.NewStringValue(e.GetKey()+"="+e.GetValue()))
	}
	fields := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
	if o := d.GetLimit(); o != nil {
		fields["limit"] = structpb.NewStringValue(o.String())
	}
	if h := d.GetHitsAddend(); h != nil {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
	}
	return &structpb.Struct{Fields: fields}
}

// mergeStruct merges src into dst: a name dst lacks is added (a copy,
// since src belongs to the configuration), two mappings of one name are
// merged, and any other value dst has stays.
func mergeStruct(dst, src *structpb.Struct) {
	for k, v := range src.GetFields() {
		have, ok := dst.Fields[k]
		if !ok {
			dst.Fields[k] = proto.Clone(v).(*structpb.Value)
			continue
		}
		if hs, vs := have.GetStructValue(), v.GetStructValue(); hs != nil && vs != nil {
			mergeStruct(hs, vs)
		}
	}
}
