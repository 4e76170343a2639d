package main

import (
	"fmt"

	. "github.com/dave/jennifer/jen"
)

// emitHeader writes header.go: the Header struct, its codec, the length
// prefix parser, the frame helpers and the lenient encoder used to answer
// frames that could not be parsed.
func (gn generator) emitHeader(l *Layouts) *File {
	h := l.Header
	f := gn.newFile(h.File)
	c := &codec{layout: h.Name + " header", typ: "Header", recv: "h", header: true, fields: h.Fields, l: l}
	var prefix *Field
	for _, fd := range h.Fields {
		if fd.Prefix {
			prefix = fd
		}
	}
	maxFrame := 1
	for i := 0; i < prefix.Len; i++ {
		maxFrame *= 10
	}

	docComment(f, fmt.Sprintf("Frame geometry of the %s header.", h.Name))
	f.Const().Defs(
		Comment("HeaderLen is the header length in bytes, the length prefix included."),
		Id("HeaderLen").Op("=").Lit(h.Declared),
		Comment("PrefixLen is the length of the ASCII-digit length prefix."),
		Id("PrefixLen").Op("=").Lit(prefix.Len),
		Comment("MinFrameLen is the smallest LEN a frame can carry: a header and no body."),
		Id("MinFrameLen").Op("=").Id("HeaderLen").Op("-").Id("PrefixLen"),
		Comment("MaxFrameLen is the largest LEN the prefix can express."),
		Id("MaxFrameLen").Op("=").Lit(maxFrame-1),
	)
	if defaults := headerDefaults(h.Fields); len(defaults) > 0 {
		docComment(f, "What a channel client puts in header fields it is given no value for (the header layout's default= options).")
		f.Const().Defs(defaults...)
	}
	for _, fd := range h.Fields {
		if len(fd.Values) == 0 {
			continue
		}
		docComment(f, fmt.Sprintf("Values of the %s field.", fd.Name))
		f.Const().DefsFunc(func(g *Group) {
			for _, v := range fd.Values {
				g.Id(goName(fd.Name) + v.Name).Op("=").Lit(v.Value)
			}
		})
	}

	c.emitStruct(f, fmt.Sprintf("Header is the %d-byte %s frame header. Text fields hold their value without the padding.", h.Declared, h.Name))
	c.emitGeometry(f, Id("HeaderLen"))

	docComment(f, "ParseLengthPrefix reads the length prefix: exactly PrefixLen ASCII digits,")
	docComment(f, "no sign and no spaces, counting the bytes that follow it.")
	f.Func().Id("ParseLengthPrefix").Params(Id("s").String()).Params(Int(), Error()).Block(
		If(Len(Id("s")).Op("!=").Id("PrefixLen").Op("||").Op("!").Qual(fw, "Digits").Call(Id("s"))).Block(
			Return(Lit(0), Qual("fmt", "Errorf").Call(Lit("length prefix %q is not %d ASCII digits"), Id("s"), Id("PrefixLen"))),
		),
		List(Id("n"), Id("_")).Op(":=").Qual(fw, "ParseDigits").Call(Id("s")),
		Return(Int().Call(Id("n")), Nil()),
	)

	c.emitDecode(f, "HeaderLen", "Decode reads the header from the first HeaderLen bytes of a frame and checks every field against its kind.")
	c.emitAppend(f, "AppendTo appends the header to dst, writing Len as the length prefix. It refuses a value that does not fit its field.")

	docComment(f, "BodyEncoder is a body that can append its fixed-width form, and says")
	docComment(f, "which transaction's frames, and which FLAG, it belongs in.")
	f.Type().Id("BodyEncoder").Interface(
		Id("AppendTo").Params(Index().Byte()).Params(Index().Byte(), Error()),
		Id("TxCode").Params().String(),
		Id("Flag").Params().String(),
	)

	docComment(f, "AppendFrame appends a whole frame: the header with LEN computed from the")
	docComment(f, "body, then the body (nil for an empty body). h is not modified. It refuses")
	docComment(f, "a body of another transaction than h's TX_CODE, or of the other FLAG.")
	f.Func().Id("AppendFrame").Params(Id("dst").Index().Byte(), Id("h").Op("*").Id("Header"), Id("body").Id("BodyEncoder")).
		Params(Index().Byte(), Error()).Block(
		If(Id("body").Op("!=").Nil().Op("&&").Parens(Id("body").Dot("TxCode").Call().Op("!=").Id("h").Dot("TxCode").Op("||").Id("body").Dot("Flag").Call().Op("!=").Id("h").Dot("Flag"))).Block(
			Return(Id("dst"), Qual("fmt", "Errorf").Call(Lit("a %s body with FLAG %q does not go in a %s frame with FLAG %q"), Id("body").Dot("TxCode").Call(), Id("body").Dot("Flag").Call(), Id("h").Dot("TxCode"), Id("h").Dot("Flag"))),
		),
		Id("start").Op(":=").Len(Id("dst")),
		Id("hdr").Op(":=").Op("*").Id("h"),
		Id("hdr").Dot("Len").Op("=").Lit(0),
		List(Id("dst"), Err()).Op(":=").Id("hdr").Dot("AppendTo").Call(Id("dst")),
		If(Err().Op("!=").Nil()).Block(Return(Id("dst").Index(Empty(), Id("start")), Err())),
		If(Id("body").Op("!=").Nil()).Block(
			If(List(Id("dst"), Err()).Op("=").Id("body").Dot("AppendTo").Call(Id("dst")), Err().Op("!=").Nil()).Block(
				Return(Id("dst").Index(Empty(), Id("start")), Err())),
		),
		Id("n").Op(":=").Len(Id("dst")).Op("-").Id("start").Op("-").Id("PrefixLen"),
		If(Id("n").Op(">").Id("MaxFrameLen")).Block(
			Return(Id("dst").Index(Empty(), Id("start")), Qual("fmt", "Errorf").Call(Lit("frame of %d bytes does not fit the length prefix"), Id("n")))),
		Comment("Overwrite the placeholder prefix in place: the slice has no length, so"),
		Comment("appending to it writes into dst's existing bytes."),
		Qual(fw, "AppendNumber").Call(Id("dst").Index(Id("start"), Id("start")), Int64().Call(Id("n")), Id("PrefixLen")),
		Return(Id("dst"), Nil()),
	)

	docComment(f, "Fields lists the header's values in layout order, for display.")
	f.Func().Params(Id("h").Op("*").Id("Header")).Id("Fields").Params().Index().Id("FieldValue").Block(
		Return(Index().Id("FieldValue").CustomFunc(multiLine, func(g *Group) {
			for _, fd := range h.Fields {
				if fd.Filler {
					continue
				}
				var val Code = Id("h").Dot(goName(fd.Name))
				if fd.Prefix {
					val = Qual("strconv", "Itoa").Call(Id("h").Dot(goName(fd.Name)))
				}
				g.Values(Id("Name").Op(":").Lit(fd.Name), Id("Value").Op(":").Add(val))
			}
		})),
	)

	docComment(f, "RawHeader takes the bytes found at each header field's position, as they")
	docComment(f, "are and unchecked, for answering a frame that could not be parsed.")
	docComment(f, "Positions beyond the end of frame are left empty.")
	f.Func().Id("RawHeader").Params(Id("frame").Index().Byte()).Id("Header").BlockFunc(func(g *Group) {
		g.Var().Id("h").Id("Header")
		for _, fd := range h.Fields {
			if fd.Filler || fd.Prefix {
				continue
			}
			g.Id("h").Dot(goName(fd.Name)).Op("=").Qual(fw, "Slice").Call(Id("frame"), Lit(fd.Start), Lit(fd.End()))
		}
		g.Return(Id("h"))
	})

	docComment(f, "AppendRawTo appends an empty-bodied frame built from h without checking")
	docComment(f, "its fields: each is cut or space-padded to its width and bytes that are")
	docComment(f, "not printable become spaces. It is for echoing unparseable input only.")
	f.Func().Params(Id("h").Op("*").Id("Header")).Id("AppendRawTo").Params(Id("dst").Index().Byte()).Index().Byte().BlockFunc(func(g *Group) {
		for _, fd := range h.Fields {
			switch {
			case fd.Prefix:
				g.List(Id("dst"), Id("_")).Op("=").Qual(fw, "AppendNumber").Call(Id("dst"), Id("MinFrameLen"), Lit(fd.Len))
			case fd.Filler:
				g.Id("dst").Op("=").Qual(fw, "AppendSpaces").Call(Id("dst"), Lit(fd.Len))
			default:
				g.Id("dst").Op("=").Qual(fw, "AppendRaw").Call(Id("dst"), Id("h").Dot(goName(fd.Name)), Lit(fd.Len))
			}
		}
		g.Return(Id("dst"))
	})
	return f
}

// headerDefaults declares a Default<Field> constant for each header field
// with a default= option.
func headerDefaults(fields []*Field) []Code {
	var defs []Code
	for _, fd := range fields {
		if fd.HasDefault {
			defs = append(defs, Id("Default"+goName(fd.Name)).Op("=").Lit(fd.Default))
		}
	}
	return defs
}
