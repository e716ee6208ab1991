"""Looking at the study: the three slice views, their rendering and layout, the view state, the 3D view and its meshing."""
