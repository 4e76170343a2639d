package corecall

import (
	"encoding/json"
	"testing"

	"gotest.tools/v3/assert"
)

// guidBodies are answers whose guid plainGUID must read as encoding/json
// does, or leave to it.
var guidBodies = []string{
	`{"guid":"0123456789abcdef0123456789abcdef","txId":"T1","balance":5,"postedAt":"20261129103000"}`,
	` { "txId" : "T1" , "guid" : "abc" } `,
	`{"txId":"T1","balance":5}`,
	`{"GUID":"abc"}`,
	`{"Guid":"abc","guid":"def"}`,
	`{"guid":"abc","guid":null}`,
	`{"guid":null}`,
	`{"guid":5}`,
	`{"guid":"a\"b"}`,
	`{"guid":"a\u0062c"}`,
	`{"gu\u0069d":"abc"}`,
	`{"guid":"ünï"}`,
	`{"nested":{"guid":"inner","x":[1,{"guid":"deep"}]},"guid":"outer"}`,
	`{"s":"a,}\"]","guid":"after"}`,
	`{"t":true,"f":false,"n":null,"num":-1.5e3,"guid":"x"}`,
	`{}`,
	`[]`,
	`"guid"`,
	`null`,
	`{"guid":"abc"`,
	`{"guid":"abc"} trailing`,
	``,
}

// TestPlainGUIDAgreesWithEncodingJSON: wherever plainGUID answers, it
// answers what decoding into the struct aboutGUID used to decode into
// would; and it answers for the plain answers a core gives.
func TestPlainGUIDAgreesWithEncodingJSON(t *testing.T) {
	for _, body := range guidBodies {
		checkPlainGUID(t, []byte(body))
	}
	_, _, ok := plainGUID([]byte(guidBodies[0]))
	assert.Assert(t, ok, "a plain answer must not need encoding/json")
}

func FuzzPlainGUID(f *testing.F) {
	for _, body := range guidBodies {
		f.Add([]byte(body))
	}
	f.Fuzz(func(t *testing.T, body []byte) { checkPlainGUID(t, body) })
}

func checkPlainGUID(t *testing.T, body []byte) {
	t.Helper()
	id, present, ok := plainGUID(body)
	if !ok {
		return
	}
	var j struct {
		GUID *string `json:"guid"`
	}
	assert.NilError(t, json.Unmarshal(body, &j), "plainGUID read %q", body)
	assert.Equal(t, present, j.GUID != nil, "%q", body)
	if present {
		assert.Equal(t, string(id), *j.GUID, "%q", body)
	}
}

// BenchmarkAboutGUID compares the check on a core's plain 200 with the
// decoding into a struct it stands in for.
func BenchmarkAboutGUID(b *testing.B) {
	body := []byte(guidBodies[0])
	const guid = "0123456789abcdef0123456789abcdef"
	b.Run("plain", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := aboutGUID(body, guid); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var j struct {
				GUID *string `json:"guid"`
			}
			if err := json.Unmarshal(body, &j); err != nil || *j.GUID != guid {
				b.Fatal(err)
			}
		}
	})
}
