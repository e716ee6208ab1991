"""Interactive 3D segmentation from prompts (points, boxes, scribbles, lassos) with nnInteractive models.

* :mod:`.model_files`: an nnInteractive checkpoint folder read safely (its pickle is never
  executed) and converted into medseg's own files (JSON + safetensors), and loaded back;
* :mod:`.prompts`: how each prompt is drawn into the prompt channels, kept sparse;
* :mod:`.resize`: the crops around a prompt, zoomed out to the network's patch;
* :mod:`.refine_boxes`: when to zoom out further, and which patches refine a zoomed answer;
* :mod:`.session`: one image, one object, prompt after prompt (the order of operations), each
  network pass reported as it starts and ends;
* :mod:`.cost`: what a prompt will cost on this computer, said before it runs.

docs/interactive.md describes what the user sees; the session's module doc the algorithm.
"""
