package main

import (
	"fmt"
	"strings"

	. "github.com/dave/jennifer/jen"

	"lhrelay/internal/fixedwidth"
)

// Packages the generated code calls.
const (
	fw = "lhrelay/internal/fixedwidth"
	cj = "lhrelay/internal/corejson"
)

// codec describes one fixed-width section being emitted: the header, or one
// transaction's request or response body.
type codec struct {
	layout string // human name used in errors, e.g. "BKTR0001 request"
	typ    string // Go type, e.g. BKTR0001Request
	recv   string // receiver name
	header bool   // offsets are frame offsets; otherwise they follow the header
	fields []*Field
	l      *Layouts
}

// offset is the expression for a field's offset in the whole frame.
func (c *codec) offset(f *Field) *Statement {
	if c.header {
		return Lit(f.Start)
	}
	return Id("HeaderLen").Op("+").Lit(f.Start)
}

// offsetID and widthID name a field's geometry constants (emitGeometry);
// a filler has none, and is spelt as literals.
func (c *codec) offsetID(f *Field) *Statement {
	if f.Filler {
		return c.offset(f)
	}
	return Id(c.typ + goName(f.Name) + "Offset")
}

func (c *codec) widthID(f *Field) *Statement {
	if f.Filler {
		return Lit(f.Len)
	}
	return Id(c.typ + goName(f.Name) + "Width")
}

// emitGeometry emits each field's frame offset and width as constants,
// and a guard that they tile the section from its start to its end
// (sectionLen bytes) with no gap or overlap, so that code naming them
// cannot build against a hand-edited or stale copy.
func (c *codec) emitGeometry(f *File, sectionLen Code) {
	docComment(f, fmt.Sprintf("Frame offset and width of each %s field.", c.layout))
	f.Const().DefsFunc(func(g *Group) {
		for _, fd := range c.fields {
			if fd.Filler {
				continue
			}
			g.Id(c.typ + goName(fd.Name) + "Offset").Op("=").Add(c.offset(fd))
			g.Id(c.typ + goName(fd.Name) + "Width").Op("=").Lit(fd.Len)
		}
	})
	var at, end Code = Id("HeaderLen"), Id("HeaderLen").Op("+").Add(sectionLen)
	if c.header {
		at, end = Lit(0), sectionLen
	}
	var guards []Code
	for _, fd := range c.fields {
		guards = append(guards, c.offsetID(fd).Op("-").Parens(at))
		at = c.offsetID(fd).Op("+").Add(c.widthID(fd))
	}
	guards = append(guards, Parens(end).Op("-").Parens(at))
	emitGuard(f, "the "+c.layout+" field geometry", guards...)
}

func kindID(k fixedwidth.Kind) Code {
	name := map[fixedwidth.Kind]string{
		fixedwidth.Numeric: "Numeric", fixedwidth.Text: "Text", fixedwidth.Code: "Code",
		fixedwidth.Timestamp: "Timestamp", fixedwidth.Hex: "Hex",
	}[k]
	return Qual(fw, name)
}

// fieldError builds &fixedwidth.FieldError{…} with its keys in reading order.
func (c *codec) fieldError(f *Field, got Code, reason string) Code {
	return Op("&").Qual(fw, "FieldError").Values(
		Id("Layout").Op(":").Lit(c.layout),
		Id("Field").Op(":").Lit(f.Name),
		Id("Offset").Op(":").Add(c.offsetID(f)),
		Id("Width").Op(":").Add(c.widthID(f)),
		Id("Kind").Op(":").Add(kindID(f.Kind)),
		Id("Got").Op(":").Add(got),
		Id("Reason").Op(":").Lit(reason),
	)
}

// member is the struct field expression, e.g. r.WdBank.
func (c *codec) member(f *Field) *Statement { return Id(c.recv).Dot(goName(f.Name)) }

// raw is the slice of the section string that holds f.
func raw(f *Field) *Statement { return Id("s").Index(Lit(f.Start), Lit(f.End())) }

func mapFunc(name, dir string) string { return goName(name) + dir }

// decodeField emits the statements that check and store one field. The
// input is the section string s; a failed check returns a FieldError.
func (c *codec) decodeField(g *Group, f *Field) {
	fail := func(got Code, reason string) Code { return Return(c.fieldError(f, got, reason)) }
	m := c.member(f)
	switch {
	case f.Filler:
		g.Comment(fmt.Sprintf("%s: filler, ignored on input.", f.Name))
	case f.Prefix:
		g.If(List(m, Err()).Op("=").Id("ParseLengthPrefix").Call(raw(f)), Err().Op("!=").Nil()).Block(
			fail(raw(f), "not "+fmt.Sprint(f.Len)+" ASCII digits"))
	case len(f.Values) > 0:
		cases := make([]Code, len(f.Values))
		for i, v := range f.Values {
			cases[i] = Id(goName(f.Name) + v.Name)
		}
		g.Switch(raw(f)).Block(
			Case(cases...).Block(m.Clone().Op("=").Add(raw(f))),
			Default().Block(fail(raw(f), "not one of "+enumList(f))),
		)
	case f.Kind == fixedwidth.Text:
		g.If(Op("!").Qual(fw, "Printable").Call(raw(f))).Block(fail(raw(f), "not printable ASCII"))
		g.Add(m).Op("=").Qual(fw, "TrimText").Call(raw(f))
	case f.Kind == fixedwidth.Hex:
		g.If(Op("!").Qual(fw, "LowerHex").Call(raw(f))).Block(fail(raw(f), "not lowercase hex digits"))
		g.Add(m).Op("=").Add(raw(f))
	case f.Kind == fixedwidth.Timestamp:
		g.If(Op("!").Qual(fw, "ValidTimestamp").Call(raw(f))).Block(fail(raw(f), "not a valid YYYYMMDDhhmmss"))
		g.Add(m).Op("=").Add(raw(f))
	case f.Kind == fixedwidth.Numeric && f.String:
		g.If(Op("!").Qual(fw, "Digits").Call(raw(f))).Block(fail(raw(f), "not all digits"))
		g.Add(m).Op("=").Add(raw(f))
	case f.Kind == fixedwidth.Numeric:
		g.If(List(m, Id("ok")).Op("=").Qual(fw, "ParseDigits").Call(raw(f)), Op("!").Id("ok")).Block(
			fail(raw(f), "not all digits"))
		if f.HasMin {
			g.If(m.Clone().Op("<").Lit(int(f.Min))).Block(fail(raw(f), fmt.Sprintf("below the minimum %d", f.Min)))
		}
	case f.Kind == fixedwidth.Code:
		g.Add(m).Op("=").Qual(fw, "TrimText").Call(raw(f))
		g.If(List(Id("_"), Id("ok")).Op("=").Id(mapFunc(f.Map, "ToCore")).Call(m), Op("!").Id("ok")).Block(
			fail(raw(f), "not a code of map "+f.Map))
	}
}

// encodeField emits the statements that check one field and append it to
// dst. A value that does not fit is refused, never truncated.
func (c *codec) encodeField(g *Group, f *Field) {
	m := c.member(f)
	fail := func(got Code, reason string) Code {
		return Return(Id("dst").Index(Empty(), Id("start")), c.fieldError(f, got, reason))
	}
	appendOr := func(call Code, got Code, reason string) {
		g.If(List(Id("dst"), Id("ok")).Op("=").Add(call), Op("!").Id("ok")).Block(fail(got, reason))
	}
	switch {
	case f.Filler:
		g.Id("dst").Op("=").Qual(fw, "AppendSpaces").Call(Id("dst"), Lit(f.Len))
	case f.Prefix:
		appendOr(Qual(fw, "AppendNumber").Call(Id("dst"), Int64().Call(m), Lit(f.Len)),
			Qual("strconv", "Itoa").Call(m), fmt.Sprintf("negative or more than %d digits", f.Len))
	case len(f.Values) > 0:
		cases := make([]Code, len(f.Values))
		for i, v := range f.Values {
			cases[i] = Id(goName(f.Name) + v.Name)
		}
		g.Switch(m).Block(
			Case(cases...).Block(Id("dst").Op("=").Append(Id("dst"), m.Clone().Op("..."))),
			Default().Block(fail(m, "not one of "+enumList(f))),
		)
	case f.Kind == fixedwidth.Text:
		appendOr(Qual(fw, "AppendText").Call(Id("dst"), m, Lit(f.Len)),
			m, fmt.Sprintf("longer than %d bytes or not printable ASCII", f.Len))
	case f.Kind == fixedwidth.Hex:
		g.If(Len(m).Op("!=").Lit(f.Len).Op("||").Op("!").Qual(fw, "LowerHex").Call(m)).Block(
			fail(m, fmt.Sprintf("not %d lowercase hex digits", f.Len)))
		g.Id("dst").Op("=").Append(Id("dst"), m.Clone().Op("..."))
	case f.Kind == fixedwidth.Timestamp:
		g.If(Op("!").Qual(fw, "ValidTimestamp").Call(m)).Block(fail(m, "not a valid YYYYMMDDhhmmss"))
		g.Id("dst").Op("=").Append(Id("dst"), m.Clone().Op("..."))
	case f.Kind == fixedwidth.Numeric && f.String:
		appendOr(Qual(fw, "AppendDigits").Call(Id("dst"), m, Lit(f.Len)),
			m, fmt.Sprintf("not 1 to %d digits", f.Len))
	case f.Kind == fixedwidth.Numeric:
		if f.HasMin {
			g.If(m.Clone().Op("<").Lit(int(f.Min))).Block(
				fail(Qual("strconv", "FormatInt").Call(m, Lit(10)), fmt.Sprintf("below the minimum %d", f.Min)))
		}
		appendOr(Qual(fw, "AppendNumber").Call(Id("dst"), m, Lit(f.Len)),
			Qual("strconv", "FormatInt").Call(m, Lit(10)), fmt.Sprintf("negative or more than %d digits", f.Len))
	case f.Kind == fixedwidth.Code:
		g.If(List(Id("_"), Id("ok")).Op("=").Id(mapFunc(f.Map, "ToCore")).Call(m), Op("!").Id("ok")).Block(
			fail(m, "not a code of map "+f.Map))
		appendOr(Qual(fw, "AppendText").Call(Id("dst"), m, Lit(f.Len)), m, fmt.Sprintf("longer than %d bytes", f.Len))
	}
}

func enumList(f *Field) string {
	s := ""
	for i, v := range f.Values {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%q", v.Value)
	}
	return s
}

// goType is the Go type a field is carried in.
func goType(f *Field) Code {
	switch {
	case f.Prefix:
		return Int()
	case f.Kind == fixedwidth.Numeric && !f.String:
		return Int64()
	}
	return String()
}

// fieldComment is the doc comment of a struct field.
func fieldComment(f *Field) string {
	s := describe(f)
	if f.JSON != "" {
		s += ", JSON " + f.JSON
	}
	if f.Account {
		s += ", account number"
	}
	if f.HasMin {
		s += fmt.Sprintf(", at least %d", f.Min)
	}
	if f.Prefix {
		s += ": bytes after the prefix"
	}
	return s
}

// emitStruct emits the struct type holding the section's fields.
func (c *codec) emitStruct(f *File, doc string) {
	docComment(f, doc)
	f.Type().Id(c.typ).StructFunc(func(g *Group) {
		for _, fd := range c.fields {
			if fd.Filler {
				continue
			}
			g.Id(goName(fd.Name)).Add(goType(fd)).Comment(fieldComment(fd))
		}
	})
}

// emitDecode emits Decode(s string) for the section.
func (c *codec) emitDecode(f *File, lenConst string, doc string) {
	docComment(f, doc)
	f.Func().Params(Id(c.recv).Op("*").Id(c.typ)).Id("Decode").Params(Id("s").String()).Error().BlockFunc(func(g *Group) {
		g.If(Len(Id("s")).Op("!=").Id(lenConst)).Block(
			Return(Op("&").Qual(fw, "LengthError").Values(
				Id("Layout").Op(":").Lit(c.layout), Id("Want").Op(":").Id(lenConst), Id("Got").Op(":").Len(Id("s")))))
		if c.needsOK(false) {
			g.Var().Id("ok").Bool()
		}
		if c.header {
			g.Var().Err().Error()
		}
		for _, fd := range c.fields {
			c.decodeField(g, fd)
		}
		g.Return(Nil())
	})
}

// canRefuse reports whether encoding the section can refuse a value, so
// that AppendTo needs to know where it started: a section of fillers alone,
// or of no field, cannot.
func (c *codec) canRefuse() bool {
	for _, fd := range c.fields {
		if !fd.Filler {
			return true
		}
	}
	return false
}

// needsOK reports whether the decode (or encode) body uses an ok variable.
func (c *codec) needsOK(encode bool) bool {
	for _, fd := range c.fields {
		switch {
		case fd.Filler || len(fd.Values) > 0:
		case encode && fd.Kind != fixedwidth.Hex && fd.Kind != fixedwidth.Timestamp:
			return true
		case !encode && (fd.Kind == fixedwidth.Code || fd.Kind == fixedwidth.Numeric && !fd.String && !fd.Prefix):
			return true
		}
	}
	return false
}

// emitAppend emits AppendTo(dst) for the section.
func (c *codec) emitAppend(f *File, doc string) {
	docComment(f, doc)
	f.Func().Params(Id(c.recv).Op("*").Id(c.typ)).Id("AppendTo").Params(Id("dst").Index().Byte()).
		Params(Index().Byte(), Error()).BlockFunc(func(g *Group) {
		if c.canRefuse() {
			g.Id("start").Op(":=").Len(Id("dst"))
		}
		if c.needsOK(true) {
			g.Var().Id("ok").Bool()
		}
		for _, fd := range c.fields {
			c.encodeField(g, fd)
		}
		g.Return(Id("dst"), Nil())
	})
}

// docComment adds a // comment line per line of text (jennifer renders a
// multi-line Comment as a /* */ block, which Go doc comments avoid).
func docComment(f *File, text string) {
	for _, line := range strings.Split(text, "\n") {
		f.Comment(line)
	}
}

// multiLine renders a composite literal with one element per line.
var multiLine = Options{Open: "{", Close: "}", Separator: ",", Multi: true}
