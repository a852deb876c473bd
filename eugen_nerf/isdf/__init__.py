"""iSDF (Ortiz et al. 2022): a signed-distance field trained online from a stream of posed depth frames.

``frames`` turns a scene into the ordered depth stream (with the bad-input checks), ``sampling`` draws
rays, samples along them and their SDF bounds, ``losses`` holds iSDF's loss, ``keyframes`` the keyframe
buffer, ``trainer`` the streaming trainer, ``mesh`` the marching-cubes export and ``evaluate`` the
comparison against the ground-truth mesh; ``cli`` is the ``eugen-isdf`` command.
"""
