"""A Gradio photo-to-anime demo over `import animegan` (the engine of animegan.c).

    pip install gradio   # not in Debian; the package itself needs only numpy
    python3 examples/gradio_app.py

The PyTorch demos this replaces loaded a torch generator and called it per request; the change
is the two lines marked below. The model is loaded once per style; Gradio's worker threads
share it (a Model converts with the GIL released; `engines` bounds how many run at once).
"""

import gradio as gr

import animegan

STYLES = [name for name in animegan.bundled_models() if not name.startswith("face-")]
MODELS = {}


def model_for(style):
    if style not in MODELS:
        MODELS[style] = animegan.Model(style)  # was: torch.hub.load(...) / model.eval()
    return MODELS[style]


def stylize(photo, style, portrait):
    if photo is None:
        raise gr.Error("no photo")
    try:
        # was: tensor conversion, model(tensor), tensor back to an image
        return model_for(style)(photo, portrait="face" if portrait else None)
    except animegan.InputError as e:
        raise gr.Error(str(e))


demo = gr.Interface(
    fn=stylize,
    inputs=[gr.Image(type="numpy", label="Photo"),
            gr.Dropdown(STYLES, value="hayao", label="Style"),
            gr.Checkbox(label="Portrait (the largest face, aligned)")],
    outputs=gr.Image(type="numpy", label="Anime"),
    title="animegan.c",
    allow_flagging="never",
)

if __name__ == "__main__":
    demo.queue(concurrency_count=2).launch()
